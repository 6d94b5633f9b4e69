package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCollectorMissingRoot: a collector whose output root is missing and
// cannot be made (its parent read-only, as ProtectSystem=strict leaves
// a directory no ReadWritePaths= names) exits with status 2, which its
// unit does not restart (RestartPreventExitStatus=2), and says how to
// make the directory.
func TestCollectorMissingRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a read-only tmpfs")
	}
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_RDONLY, "size=1m"); err != nil {
		t.Fatalf("mounting a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, 0) })
	dir := filepath.Join(mnt, "pcap")
	code, _, lines := loggedRun(t, context.Background(), false, "collector", "--dir", dir, "--insecure", "--listen", "127.0.0.1:0")
	last := lines[len(lines)-1]
	if code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	for _, want := range []string{dir + " does not exist and cannot be created", "install -d -o root -g root -m 0750 " + dir, "ReadWritePaths=" + dir} {
		if !strings.Contains(last, want) {
			t.Errorf("error %q does not say %q", last, want)
		}
	}
}
