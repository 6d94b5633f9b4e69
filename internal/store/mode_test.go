package store

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// TestRootFileModes: everything a reader of the output root uses, the
// data files, their indexes and retention's index of file times
// (layout.RetainDir), is created 0640 less the umask: an analyst in the
// collector's group reads all of it, and nobody else any of it.
func TestRootFileModes(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	dir := t.TempDir()
	writeRotated(t, dir, "modes")
	var data, retain int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case strings.HasPrefix(rel, "modes"+string(filepath.Separator)):
			data++
		case strings.HasPrefix(rel, layout.RetainDir+string(filepath.Separator)):
			retain++
		default:
			return nil // the root's own files: the state, the lock, the reserve
		}
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if m := fi.Mode().Perm(); m != 0o640 {
			t.Errorf("%s: mode %04o, want 0640 (umask 022)", rel, m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if data < 3 || retain != 1 {
		t.Fatalf("%d data files and indexes, %d retention indexes; want several and 1", data, retain)
	}
}
