package store

import (
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
)

// TestCommitAfterCutBack: batches written and then cut away by a failed
// rotation are in no file: the next Commit says so and raises no mark,
// nor does a later one.
func TestCommitAfterCutBack(t *testing.T) {
	c := newCore(t, Config{})
	s, _, err := c.Begin(hello("cut", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(0, batchPayload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	if seq, err := s.Commit(); seq != 1 || err != nil {
		t.Fatalf("Commit = %d, %v", seq, err)
	}
	if _, err := s.Batch(0, batchPayload(2, 10, 10)); err != nil { // written, not committed
		t.Fatal(err)
	}
	w := c.writers["cut"]
	w.mu.Lock()
	w.file.f.Close() // the rotation's write(2) fails
	w.file.rotateAt = time.Now()
	w.mu.Unlock()
	c.tick(time.Now())
	if c.Counters.FileErrors.Load() == 0 {
		t.Fatal("the failed rotation was not counted")
	}
	if seq, err := s.Commit(); !errors.Is(err, ErrCutBack) || seq != 1 {
		t.Fatalf("Commit after the cut = %d, %v; want 1, ErrCutBack", seq, err)
	}
	if seq, err := s.Commit(); err != nil || seq != 1 {
		t.Fatalf("the next Commit = %d, %v; want 1: batch 2 is in no file", seq, err)
	}
	if pkts := readParts(t, filepath.Join(c.Dir(), "cut")); len(pkts) != 10 {
		t.Fatalf("%d packets in the files, want batch 1's 10", len(pkts))
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{Dir: "d"}, true},
		{"no dir", Config{}, false},
		{"rotate size below the minimum", Config{Dir: "d", RotateSize: MinRotateSize - 1}, false},
		{"rotate size at the minimum", Config{Dir: "d", RotateSize: MinRotateSize}, true},
		{"size rotation off", Config{Dir: "d", RotateSize: -1}, true},
		{"rotate interval below the minimum", Config{Dir: "d", RotateInterval: MinRotateInterval - 1}, false},
		{"time rotation off", Config{Dir: "d", RotateInterval: -1}, true},
		{"fsync per batch", Config{Dir: "d", Fsync: FsyncPerBatch}, true},
		{"fsync never", Config{Dir: "d", Fsync: FsyncNever}, true},
		{"fsync negative interval", Config{Dir: "d", Fsync: -3}, false},
		{"idle close negative", Config{Dir: "d", IdleClose: -time.Second}, false},
		{"gzip level 9", Config{Dir: "d", FileCompress: compress.Spec{Codec: compress.Gzip, Level: 9}}, true},
		{"gzip level 10", Config{Dir: "d", FileCompress: compress.Spec{Codec: compress.Gzip, Level: 10}}, false},
		{"zstd level 22", Config{Dir: "d", FileCompress: compress.Spec{Codec: compress.Zstd, Level: 22}}, true},
		{"no codec with a level", Config{Dir: "d", FileCompress: compress.Spec{Level: 1}}, false},
		{"lz4 is no file codec", Config{Dir: "d", FileCompress: compress.Spec{Codec: compress.LZ4}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestParseFsync: every policy round-trips through its text, and bad
// ones are refused.
func TestParseFsync(t *testing.T) {
	for s, want := range map[string]time.Duration{"batch": FsyncPerBatch, "never": FsyncNever, "1s": time.Second, "250ms": 250 * time.Millisecond} {
		got, err := ParseFsync(s)
		if err != nil || got != want || FormatFsync(got) != s {
			t.Errorf("ParseFsync(%q) = %v, %v (formats as %q)", s, got, err, FormatFsync(got))
		}
	}
	for _, s := range []string{"", "0s", "-1s", "always", "1"} {
		if _, err := ParseFsync(s); err == nil {
			t.Errorf("ParseFsync(%q) accepted", s)
		}
	}
	if FormatFsync(0) != DefaultFsync.String() {
		t.Errorf("FormatFsync(0) = %q, want the default's", FormatFsync(0))
	}
}
