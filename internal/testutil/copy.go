package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// CopyFiles copies the regular files of directory src into dst (made
// if need be), refusing to overwrite one: a test merging output roots
// (agent directories of several collectors into one) must not lose a
// file to a name that two of them share.
func CopyFiles(t testing.TB, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		to := filepath.Join(dst, e.Name())
		if _, err := os.Lstat(to); err == nil {
			t.Fatalf("%s in two roots: not copied over", to)
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			err = os.WriteFile(to, b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
