//go:build cgo && linux

package capture

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU runs f on one OS thread and returns the CPU time the
// thread spent in it.
func threadCPU(f func() error) (time.Duration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		return 0, err
	}
	err := f()
	if gerr := unix.Getrusage(unix.RUSAGE_THREAD, &after); gerr != nil {
		return 0, gerr
	}
	cpu := func(r *unix.Rusage) time.Duration {
		return time.Duration(r.Utime.Nano() + r.Stime.Nano())
	}
	return cpu(&after) - cpu(&before), err
}

// TestFilterLimitsCompileFast: the slowest filters found within the
// limits compile in well under a second of CPU (about a quarter of one
// here; the thread's CPU time, which a busy machine does not inflate as
// it does the wall clock's): the limits are what keeps one query's
// filter from holding up the others' (libpcap compiles one at a time).
func TestFilterLimitsCompileFast(t *testing.T) {
	const n = MaxFilterTerms
	pr := func(i int) string { return fmt.Sprintf("portrange %d-%d", i+1, i+100) }
	for _, expr := range []string{
		joined(n, " or ", pr),
		"not (" + joined(n, " or ", pr) + ")",
		"vlan and (" + joined(n-1, " or ", pr) + ")",
		"(" + joined(n/2, " or ", pr) + ") and (" + joined(n/2, " or ", pr) + ")",
		joined(n/2, " or ", func(i int) string { return fmt.Sprintf("(portrange %d-%d and not port %d)", i+1, i+100, i+7) }),
		"port " + joined(n, " or ", func(i int) string { return fmt.Sprint(i + 1) }),
		joined(n, " or ", func(i int) string { return fmt.Sprintf("net 10.%d.0.0/16", i) }),
		"host " + joined(n, " or ", func(i int) string { return fmt.Sprintf("10.0.0.%d", i) }),
		strings.Repeat("tcp[", 815) + "1" + strings.Repeat("]", 815) + ">0",
	} {
		if err := CheckFilter(expr); err != nil {
			t.Fatalf("%.40q: %v", expr, err)
		}
		d, err := threadCPU(func() error { _, err := compile(LinkTypeEthernet, DefaultSnapLen, expr); return err })
		if err != nil {
			t.Fatalf("%.40q: %v", expr, err)
		}
		if d > time.Second {
			t.Errorf("%.40q (%d bytes, %d terms) took %v to compile", expr, len(expr), filterTerms(expr), d)
		}
	}
}
