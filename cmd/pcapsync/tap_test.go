package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

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
		{append(coll, "--tap", "127.0.0.1:0", "--tap-queue", "1K"), "queue size 1024 out of range 64KiB..1GiB (--tap-queue)"},
		{[]string{"tail", "--collector-admin", "127.0.0.1:1", "--agent", "a", "--insecure", "--tls-ca", "ca.pem"}, "exclude each other"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}
