package privilege

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMakeDir, as root: a missing directory is made with its parents
// and handed to the user, who may then write in it; an existing one is
// neither chowned nor changed, and Writable refuses it to a user who
// may not write there.
func TestMakeDir(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: MakeDir hands a directory over, which needs root")
	}
	old := unix.Umask(0o022)
	t.Cleanup(func() { unix.Umask(old) })
	root := t.TempDir()
	// t.TempDir's directories are root's alone; the user must traverse them.
	for _, d := range []string{filepath.Dir(root), root} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	gid := nogroup(t)

	missing := filepath.Join(root, "a", "b", "out")
	made, err := MakeDir(missing, 65534, gid)
	if err != nil || !made {
		t.Fatalf("MakeDir(missing) = %v, %v; want made", made, err)
	}
	checkDir(t, filepath.Join(root, "a"), 0, 0, 0o755)
	checkDir(t, filepath.Join(root, "a", "b"), 0, 0, 0o755)
	checkDir(t, missing, 65534, gid, 0o750)
	if got := runWritable(t, missing); got != "ok" {
		t.Errorf("Writable(made dir) as nobody: %s", got)
	}

	existing := filepath.Join(root, "existing")
	if err := os.Mkdir(existing, 0o700); err != nil {
		t.Fatal(err)
	}
	made, err = MakeDir(existing, 65534, gid)
	if err != nil || made {
		t.Fatalf("MakeDir(existing) = %v, %v; want left as it is", made, err)
	}
	checkDir(t, existing, 0, 0, 0o700)
	got := runWritable(t, existing)
	if want := existing + " is not writable by the user (permission denied) true"; got != "error: "+want {
		t.Errorf("Writable(root's dir) as nobody: %q, want %q", got, "error: "+want)
	}
}

// checkDir fails t unless dir is a directory of uid and gid with mode perm.
func checkDir(t *testing.T, dir string, uid, gid int, perm fs.FileMode) {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != perm || int(st.Uid) != uid || int(st.Gid) != gid {
		t.Errorf("%s: %v owned by %d:%d, want a directory %v owned by %d:%d", dir, fi.Mode(), st.Uid, st.Gid, perm, uid, gid)
	}
}

// runWritable runs writableHelper as nobody on dir and returns its line.
func runWritable(t *testing.T, dir string) string {
	t.Helper()
	return strings.TrimSpace(string(runHelper(t, writableEnv, "nobody:"+dir)))
}
