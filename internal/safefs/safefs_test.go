//go:build unix

package safefs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// tree makes root/a/f (regular), root/link -> a, root/a/lf -> f,
// root/a/fifo, and outside/victim, and returns root and victim.
func tree(t *testing.T) (root, victim string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	victim = filepath.Join(base, "victim")
	must(t, os.MkdirAll(filepath.Join(root, "a"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "a", "f"), []byte("data"), 0o644))
	must(t, os.WriteFile(victim, []byte("victim"), 0o644))
	must(t, os.Symlink("a", filepath.Join(root, "link")))
	must(t, os.Symlink("f", filepath.Join(root, "a", "lf")))
	must(t, os.Symlink(victim, filepath.Join(root, "a", "out")))
	must(t, unix.Mkfifo(filepath.Join(root, "a", "fifo"), 0o644))
	return root, victim
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestOpen(t *testing.T) {
	root, _ := tree(t)
	for _, tc := range []struct {
		name string
		want error
	}{
		{"a/f", nil},
		{"a/lf", ErrLink},
		{"a/out", ErrLink},
		{"a/fifo", ErrNotRegular}, // must not block
		{"a", ErrNotRegular},
		{"a/missing", fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Open(filepath.Join(root, tc.name))
			if f != nil {
				f.Close()
			}
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Open(%s) = %v, want %v", tc.name, err, tc.want)
			}
		})
	}
}

func TestOpenInRefusesLinkedDirectories(t *testing.T) {
	root, _ := tree(t)
	for _, tc := range []struct {
		rel  string
		want error
	}{
		{"a/f", nil},
		{"link/f", ErrLink},
		{"a/lf", ErrLink},
		{"a/fifo", ErrNotRegular},
		{"../root/a/f", ErrPath},
		{"/etc/passwd", ErrPath},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			for _, fallback := range []bool{false, true} {
				noOpenat2.Store(fallback)
				f, err := OpenIn(root, tc.rel, os.O_RDONLY, 0)
				if f != nil {
					f.Close()
				}
				if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("OpenIn(%s), fallback %v = %v, want %v", tc.rel, fallback, err, tc.want)
				}
			}
			noOpenat2.Store(false)
		})
	}
}

func TestCreateExclNeverWritesThroughALink(t *testing.T) {
	root, victim := tree(t)
	_, err := CreateExcl(filepath.Join(root, "a", "out"), 0o644)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateExcl over a planted link = %v, want ErrExist", err)
	}
	b, _ := os.ReadFile(victim)
	if string(b) != "victim" {
		t.Fatalf("victim changed: %q", b)
	}
	// OpenFile with O_TRUNC through the link is refused too.
	if _, err := OpenFile(filepath.Join(root, "a", "out"), os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, ErrLink) {
		t.Fatalf("OpenFile(O_TRUNC) through a link = %v, want ErrLink", err)
	}
	f, err := CreateExcl(filepath.Join(root, "a", "new"), 0o600)
	must(t, err)
	f.Close()
	// In a linked directory, CreateIn-style opens are refused.
	if _, err := OpenIn(root, "link/new2", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); !errors.Is(err, ErrLink) {
		t.Fatalf("create below a linked directory = %v, want ErrLink", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "a", "new2")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("file created through the link: %v", err)
	}
}

func TestDir(t *testing.T) {
	root, _ := tree(t)
	must(t, Dir(filepath.Join(root, "a")))
	if err := Dir(filepath.Join(root, "link")); !errors.Is(err, ErrLink) {
		t.Fatalf("Dir(link) = %v", err)
	}
	if err := Dir(filepath.Join(root, "a", "f")); !errors.Is(err, ErrNotDir) {
		t.Fatalf("Dir(file) = %v", err)
	}
	if err := DirsIn(root, "link/x"); !errors.Is(err, ErrLink) {
		t.Fatalf("DirsIn(link/x) = %v", err)
	}
}

func TestReadFile(t *testing.T) {
	root, _ := tree(t)
	b, err := ReadFile(filepath.Join(root, "a", "f"), 4)
	if err != nil || string(b) != "data" {
		t.Fatalf("ReadFile = %q, %v", b, err)
	}
	if _, err := ReadFile(filepath.Join(root, "a", "f"), 3); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("ReadFile over the limit = %v", err)
	}
	if _, err := ReadFile(filepath.Join(root, "a", "fifo"), 3); !errors.Is(err, ErrNotRegular) {
		t.Fatalf("ReadFile(fifo) = %v", err)
	}
}

func TestRemoveInRefusesLinkedDirectories(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		noOpenat2.Store(fallback)
		root, _ := tree(t)
		must(t, os.WriteFile(filepath.Join(root, "a", "g"), nil, 0o644))
		if err := RemoveIn(root, "link/g"); !errors.Is(err, ErrLink) {
			t.Errorf("fallback %v: RemoveIn through a linked directory = %v, want ErrLink", fallback, err)
		}
		if _, err := os.Lstat(filepath.Join(root, "a", "g")); err != nil {
			t.Errorf("fallback %v: file removed through the link: %v", fallback, err)
		}
		must(t, RemoveIn(root, "a/g"))
		must(t, RemoveIn(root, "a/out")) // a link itself goes, not its target
		if err := RemoveIn(root, "a/g"); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("fallback %v: RemoveIn of a missing file = %v", fallback, err)
		}
		if err := RemoveIn(root, "../x"); !errors.Is(err, ErrPath) {
			t.Errorf("fallback %v: RemoveIn(../x) = %v", fallback, err)
		}
	}
	noOpenat2.Store(false)
}
