//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"golang.org/x/sys/unix"
)

// TestSecondCollectorRefused: a second collector on the --dir of a
// running one exits non-zero at start, naming the first (its pid), and
// the first keeps running and stops cleanly.
func TestSecondCollectorRefused(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	first := startCollector(t, ctx, "", freeport.Addr(t), dir)
	second := startProc(t, ctx, "second collector", "", "collector", "--listen", freeport.Addr(t), "--dir", dir)
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

// TestRetentionCacheFIFOStops: a FIFO planted as an agent's retention
// cache is ignored with a warning, and SIGTERM still stops the
// collector (it used to block retention, and shutdown with it, for
// good).
func TestRetentionCacheFIFOStops(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "a1"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, store.RetainDir), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(dir, store.RetainDir, "a1.json"), 0o640); err != nil {
		t.Fatal(err)
	}
	coll := startCollector(t, ctx, "", freeport.Addr(t), dir, "--retain-size", "20M", "--rotate-size", "4M")
	coll.waitFor(logSavedIndexIgnored, 10*time.Second)
	coll.stop(10 * time.Second)
}
