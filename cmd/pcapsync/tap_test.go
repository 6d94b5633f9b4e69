package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/tap"
)

func TestParseTapSpec(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want tapSpec
		bad  bool
	}{
		{in: "127.0.0.1:7740", want: tapSpec{addr: "127.0.0.1:7740"}},
		{in: "127.0.0.1:7740=web1", want: tapSpec{"127.0.0.1:7740", tap.Selection{Agent: "web1"}}},
		{in: "[::1]:7740=web1:eth0:1", want: tapSpec{"[::1]:7740", tap.Selection{Agent: "web1", Iface: "eth0:1"}}},
		{in: ":7740=*", want: tapSpec{addr: ":7740"}},
		{in: "127.0.0.1", bad: true},
		{in: "127.0.0.1:7740=../x", bad: true},
		{in: "127.0.0.1:7740=:eth0", bad: true},
	} {
		got, err := parseTapSpec(tt.in)
		if (err != nil) != tt.bad || !tt.bad && got != tt.want {
			t.Errorf("parseTapSpec(%q) = %+v, %v", tt.in, got, err)
		}
	}
}

// TestTapFlags: bad tap flags are usage errors that name the flag.
func TestTapFlags(t *testing.T) {
	coll := []string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(coll, "--tap", "7740"), `for "--tap" flag`},
		{append(coll, "--tap", "127.0.0.1:0=no/such"), "agent"},
		{append(coll, "--tap-queue", "1M"), "--tap-queue needs --tap"},
		{append(coll, "--tap", "127.0.0.1:0", "--tap-queue", "1K"), "--tap-queue 1024 out of range"},
		{[]string{"tail", "--collector-admin", "127.0.0.1:1", "--agent", "a", "--insecure", "--tls-ca", "ca.pem"}, "exclude each other"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
