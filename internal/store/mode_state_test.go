package store

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestModeStateFiles: the mode Open chooses by Config.Shared, and the
// state file each writes: an owned root's StateFile and a shared root's
// per-agent state file are the same document, byte for byte, for the
// same marks (the format both modes share).
func TestModeStateFiles(t *testing.T) {
	const want = `{
 "version": 1,
 "instances": [
  {
   "instance": "0102030405060708090a0b0c0d0e0f10",
   "name": "a1",
   "last_seq": 7,
   "seen": "2026-11-27T01:02:03.000000004Z"
  }
 ]
}`
	id := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	seen := time.Date(2026, 11, 27, 1, 2, 3, 4, time.UTC)
	for _, tc := range []struct {
		name   string
		shared bool
		file   string
	}{
		{"owned", false, StateFile},
		{"shared", true, filepath.Join(AgentStateDir, "a1.json")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := Open(Config{Dir: dir, Shared: tc.shared})
			if err != nil {
				t.Fatal(err)
			}
			if _, owned := st.mode.(ownedRoot); owned == tc.shared {
				t.Fatalf("Shared %v: mode %T", tc.shared, st.mode)
			}
			if _, err := st.Writer("a1"); err != nil { // Shared: takes the agent
				t.Fatal(err)
			}
			in := st.Instance(id, "a1")
			in.raise(7)
			st.instMu.Lock()
			in.seen = seen
			st.instMu.Unlock()
			if err := st.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != want {
				t.Errorf("%s:\n%s\nwant\n%s", tc.file, b, want)
			}
		})
	}
}
