package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSecondCollectorRefused: a second collector on the --dir of a
// running one exits non-zero at start, naming the first (its pid), and
// the first keeps running and stops cleanly.
func TestSecondCollectorRefused(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	first := startCollector(t, ctx, "", fmt.Sprintf("127.0.0.1:%d", freePort(t)), dir)
	second := startProc(t, ctx, "second collector", "", "collector", "--listen", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--dir", dir)
	if code := second.wait(20 * time.Second); code == 0 {
		t.Fatal("a second collector on the same --dir started")
	}
	if want := fmt.Sprintf("held by an exclusive writer (pid %d", first.cmd.Process.Pid); !strings.Contains(second.stderr.String(), want) {
		t.Errorf("second collector's error does not name the first (%q):\n%s", want, second.stderr.String())
	}
	if first.exited() {
		t.Fatal("the first collector exited")
	}
	first.stop(20 * time.Second)
}
