package bench

import (
	"strings"
	"testing"
)

func TestRetains(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--fsync", "never"}, false},
		{[]string{"--retain-free", "0"}, false},
		{[]string{"--rotate-size", "32M", "--retain-size", "128M"}, true},
		{[]string{"--retain-age=1h"}, true},
	} {
		if got := retains(tc.args); got != tc.want {
			t.Errorf("retains(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestCheckRetained(t *testing.T) {
	line := func(packets, fileErrors string) string {
		return "pcapsync collector: sessions 1, rejected 0, protocol errors 0, batches 3, packets " + packets +
			", bytes 9, duplicates dropped 0, file errors " + fileErrors + ", peer timeouts 0, over connection limit 0\n"
	}
	if err := checkRetained(100, line("100", "0")); err != nil {
		t.Errorf("all written, files deleted: %v", err)
	}
	for _, tc := range []struct{ out, want string }{
		{line("99", "0"), "collector wrote 99 packets"},
		{line("100", "2"), "with 2 file errors"},
		{"nothing", "no collector summary"},
	} {
		if err := checkRetained(100, tc.out); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.out, err, tc.want)
		}
	}
}
