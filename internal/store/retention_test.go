package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// writeRotated writes 30 batches of 10 packets (timestamps 1.7e18 +
// k*1000) of agent name below dir, rotating at MinRotateSize with
// retention's index kept, and closes the store.
func writeRotated(t *testing.T, dir, name string) *testCore {
	t.Helper()
	c := newCore(t, Config{Dir: dir, RotateSize: MinRotateSize, Retain: RetainConfig{FreePercent: -1}})
	s, _, err := c.Begin(hello(name, 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 30; seq++ {
		if _, err := s.Batch(0, batchPayload(seq, int(seq-1)*10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetentionIndexRecorded: the Store tells retention of every file
// it closes, with its bytes (the index's included) and its first and
// last packet, and the index is saved at Close (retention's own tests
// rebuild it from there at a restart).
func TestRetentionIndexRecorded(t *testing.T) {
	dir := t.TempDir()
	c := writeRotated(t, dir, "idx")
	recorded := c.ret.Files("idx")
	if len(recorded) < 3 {
		t.Fatalf("%d files indexed, want several (rotation at %d bytes)", len(recorded), MinRotateSize)
	}
	saved, err := layout.ReadIndex(dir, "idx")
	if err != nil || len(saved) != len(recorded) {
		t.Fatalf("saved index: %d files, %v; want %d", len(saved), err, len(recorded))
	}
	// Packet k has timestamp 1.7e18 + k*1000: the files cover 0..299 in order.
	const ts0 = 1_700_000_000_000_000_000
	if recorded[0].First != ts0 || recorded[len(recorded)-1].Last != ts0+299*1000 {
		t.Errorf("index spans %d..%d, want %d..%d", recorded[0].First, recorded[len(recorded)-1].Last, int64(ts0), int64(ts0+299*1000))
	}
	for i, f := range recorded {
		st, err := os.Stat(filepath.Join(dir, "idx", f.Name))
		if err != nil || st.Size()+layout.IndexBytes(filepath.Join(dir, "idx", f.Name)) != f.Bytes || st.ModTime().UnixNano() != f.Mod {
			t.Errorf("%s: index says %d bytes, the file %v (%v)", f.Name, f.Bytes, st, err)
		}
		if i > 0 && f.First != recorded[i-1].Last+1000 {
			t.Errorf("%s starts at %d, the file before ends at %d: not contiguous", f.Name, f.First, recorded[i-1].Last)
		}
		if saved[f.Name] != f {
			t.Errorf("%s: saved %+v, recorded %+v", f.Name, saved[f.Name], f)
		}
	}
}
