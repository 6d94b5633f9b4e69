package store

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// mountTmpfs mounts a tmpfs of size bytes on a new temporary directory,
// unmounted in Cleanup; it skips the test without root.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// remountReadOnly remounts the tmpfs at dir read-only, or skips the
// test.
func remountReadOnly(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("remounting read-only: %v", err)
	}
}
