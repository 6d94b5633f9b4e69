package store

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// readState returns the state file's entries.
func readState(t *testing.T, dir string) []stateEntry {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if os.IsNotExist(err) {
		return nil
	}
	var doc stateDoc
	if err == nil {
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		t.Fatal(err)
	}
	return doc.Instances
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// TestStateKeepsOnlyMarks: instances that only said hello are not kept
// in the state file, and a save that changes no mark leaves the file
// alone.
func TestStateKeepsOnlyMarks(t *testing.T) {
	dir := t.TempDir()
	c := newCore(t, Config{Dir: dir})
	s, _, err := c.Begin(hello("data", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	s.Batch(0, batchPayload(1, 0, 10))
	s.Commit()
	s.End(true) // closes and publishes the file: saves the state
	path := filepath.Join(dir, StateFile)
	ino := inode(t, path)
	for i := range 500 {
		h := hello("cycler", 0)
		h.Instance = [16]byte{0xEE, byte(i), byte(i >> 8)}
		s, _, err := c.Begin(h, func() {})
		if err != nil {
			t.Fatal(err)
		}
		s.End(i%2 == 0)
	}
	if err := c.saveState(); err != nil {
		t.Fatal(err)
	}
	if inode(t, path) != ino {
		t.Fatal("state file rewritten though no mark changed")
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	ents := readState(t, dir)
	if len(ents) != 1 || ents[0].Name != "data" || ents[0].LastSeq != 1 {
		t.Fatalf("state file holds %d entries (first %+v), want only agent data at 1", len(ents), ents[:min(1, len(ents))])
	}
	if inode(t, path) != ino {
		t.Fatal("state file rewritten at Close though no mark changed")
	}

	c2 := newCore(t, Config{Dir: dir})
	s, w, err := c2.Begin(hello("data", 1), func() {})
	if err != nil || w.LastSeq != 1 {
		t.Fatalf("after restart LastSeq %d (%v), want 1", w.LastSeq, err)
	}
	s.Batch(0, batchPayload(2, 10, 10))
	s.Commit()
	s.End(true)
	if inode(t, path) == ino {
		t.Fatal("state file not rewritten after a mark changed")
	}
	if ents := readState(t, dir); len(ents) != 1 || ents[0].LastSeq != 2 {
		t.Fatalf("state after a new mark: %+v", ents)
	}
}

// TestOpenRefusesRoot: an output root that cannot be created or
// written, or a full disk, is refused at start with an error naming the
// directory and the reason.
func TestOpenRefusesRoot(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o600)
	tests := []struct {
		name     string
		dir      func(t *testing.T) string
		reason   string
		unusable bool // ErrRootUnusable: a fix the error names
	}{
		{"a file where the directory should be", func(*testing.T) string { return file }, "cannot be created", false},
		{"below a file", func(*testing.T) string { return filepath.Join(file, "out") }, "cannot be created", false},
		{"read-only file system", func(t *testing.T) string {
			dir := mountTmpfs(t, 8<<20)
			remountReadOnly(t, dir)
			return dir
		}, "not writable", true},
		{"read-only file system: the hint", func(t *testing.T) string {
			dir := mountTmpfs(t, 8<<20)
			remountReadOnly(t, dir)
			return dir
		}, "; a systemd unit also needs ReadWritePaths=", true},
		{"missing on a read-only file system", func(t *testing.T) string {
			dir := mountTmpfs(t, 8<<20)
			remountReadOnly(t, dir)
			return filepath.Join(dir, "pcap")
		}, "does not exist and cannot be created (mkdir ", true},
		{"missing: the command that makes it", func(t *testing.T) string {
			dir := mountTmpfs(t, 8<<20)
			remountReadOnly(t, dir)
			return filepath.Join(dir, "pcap")
		}, "; make it for the user this process runs as: install -d -o root -g root -m 0750 ", true},
		{"full disk", func(t *testing.T) string {
			dir := mountTmpfs(t, 8<<20)
			fill(t, filepath.Join(dir, "filler"), 512<<10)
			return dir
		}, "disk full", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.dir(t)
			c, err := openCore(Config{Dir: dir})
			if err == nil {
				c.Close()
				t.Fatal("Open accepted it")
			}
			if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, tt.reason) {
				t.Fatalf("error %q, want it to name %s and say %q", msg, dir, tt.reason)
			}
			if errors.Is(err, ErrRootUnusable) != tt.unusable {
				t.Errorf("error %q: ErrRootUnusable %v, want %v", err, !tt.unusable, tt.unusable)
			}
			t.Log(err)
		})
	}
}

// TestStateReserve: the store makes its disk reserve at start and
// keeps it through state saves. Spending it on a full disk is
// TestDiskFullE2E's part (test/e2e: a real full tmpfs).
func TestStateReserve(t *testing.T) {
	c := newCore(t, Config{})
	reserve := filepath.Join(c.Dir(), ReserveFile)
	if st, err := os.Stat(reserve); err != nil || st.Size() < minReserve {
		t.Fatalf("no reserve of %d bytes after start: %v", minReserve, err)
	}
	s, _, err := c.Begin(hello("r1", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(0, batchPayload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	s.End(true)
	if st, err := os.Stat(reserve); err != nil || st.Size() < minReserve {
		t.Fatalf("reserve after a save: %v", err)
	}
}
