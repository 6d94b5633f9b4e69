package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOwnerLock: one owner of a root at a time. A second Store is
// refused at Open, naming the holder, before it touches the first one's
// open file; the members of one writer group share the root, another
// group is refused; the root is free again after Close.
func TestOwnerLock(t *testing.T) {
	type open struct {
		shared bool
		group  string
	}
	for _, tc := range []struct {
		name        string
		first       open
		second      open
		admitted    bool
		holderNamed string // in the refusal
	}{
		{"exclusive after exclusive", open{}, open{}, false, "an exclusive writer (pid " + strconv.Itoa(os.Getpid())},
		{"group after exclusive", open{}, open{true, "g"}, false, "an exclusive writer"},
		{"exclusive after group", open{true, "g"}, open{}, false, `writer group "g"`},
		{"other group", open{true, "g"}, open{true, "h"}, false, `writer group "g"`},
		{"same group", open{true, "g"}, open{true, "g"}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			first := newCore(t, Config{Dir: dir, Shared: tc.first.shared, Group: tc.first.group})
			// The first owner writes: an open .part with a committed batch.
			s, _, err := first.Begin(hello("a1", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Batch(0, batchPayload(1, 0, 10)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(); err != nil {
				t.Fatal(err)
			}
			parts := partFiles(filepath.Join(dir, "a1"))
			if len(parts) != 1 {
				t.Fatalf("%d .part files, want 1", len(parts))
			}
			before, err := os.Stat(parts[0])
			if err != nil {
				t.Fatal(err)
			}
			second, err := openCore(Config{Dir: dir, Shared: tc.second.shared, Group: tc.second.group})
			switch {
			case tc.admitted && err != nil:
				t.Fatalf("member of the same group refused: %v", err)
			case tc.admitted:
				if err := second.Close(); err != nil {
					t.Fatal(err)
				}
			case err == nil:
				second.Close()
				t.Fatal("second owner admitted")
			case !errors.Is(err, ErrRootBusy) || !strings.Contains(err.Error(), tc.holderNamed):
				t.Fatalf("second owner: %v; want ErrRootBusy naming %s", err, tc.holderNamed)
			}
			// The first one's open file is untouched: not renamed, cut or
			// stripped of its index.
			after, err := os.Stat(parts[0])
			if err != nil || after.Size() != before.Size() {
				t.Fatalf("the first owner's open file after the second Open: %v, %d bytes, want %d", err, after.Size(), before.Size())
			}
			if _, err := s.Batch(0, batchPayload(2, 10, 10)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			// Given back: anyone may own the root now.
			third, err := openCore(Config{Dir: dir, Shared: tc.second.shared, Group: tc.second.group})
			if err != nil {
				t.Fatalf("Open after Close: %v", err)
			}
			third.Close()
		})
	}
}

// TestOwnerFileRefusesLinks: a link planted as the owner file is not
// followed (Open fails, the target is untouched).
func TestOwnerFileRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.Symlink(victim, filepath.Join(dir, OwnerFile)); err != nil {
		t.Fatal(err)
	}
	if c, err := openCore(Config{Dir: dir}); err == nil {
		c.Close()
		t.Fatal("Open through a linked owner file succeeded")
	}
	if _, err := os.Lstat(victim); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target was created: %v", err)
	}
}
