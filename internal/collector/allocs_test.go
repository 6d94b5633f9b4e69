package collector

import (
	"testing"
	"time"
)

// TestBatchSteadyStateAllocs: checking, deduplicating and writing a
// batch of 1000 packets into an open file, and committing it, allocates
// nothing, whatever the fsync policy.
func TestBatchSteadyStateAllocs(t *testing.T) {
	for name, fsync := range map[string]time.Duration{"1s": 0, "never": FsyncNever, "batch": FsyncPerBatch} {
		t.Run(name, func(t *testing.T) { testBatchAllocs(t, fsync) })
	}
}

func testBatchAllocs(t *testing.T, fsync time.Duration) {
	c := newCore(t, Config{Fsync: fsync})
	defer c.Close()
	s, _, err := c.Begin(hello("a1", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.End(true)
	const runs, perBatch = 50, 1000
	payloads := make([][]byte, runs+2)
	for i := range payloads {
		payloads[i] = batchPayload(uint64(i+1), i*perBatch, perBatch)
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		dup, err := s.Batch(0, payloads[next])
		next++
		if err != nil || dup {
			t.Fatalf("batch %d: dup %v, %v", next, dup, err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per batch of %d packets, want 0", allocs, perBatch)
	}
}
