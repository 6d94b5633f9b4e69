package collector

import (
	"bytes"

	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestBatchSteadyStateAllocs: checking, deduplicating, decompressing and
// writing a batch of 1000 packets into an open file, and committing it,
// allocates nothing, whatever the fsync policy and codec: compressed
// files too, compressed off the connection's goroutine by a goroutine
// that lives as long as the open file (store's aheadWriter), not one
// started a block (the zstd library's concurrent mode, before, started
// two a 64 KiB block).
func TestBatchSteadyStateAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	for name, fsync := range map[string]time.Duration{"1s": 0, "never": store.FsyncNever, "batch": store.FsyncPerBatch} {
		t.Run(name, func(t *testing.T) { testBatchAllocs(t, Config{Store: store.Config{Fsync: fsync}}, compress.Spec{}) })
	}
	for _, fc := range []compress.Spec{{Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		t.Run("file-"+fc.String(), func(t *testing.T) { testBatchAllocs(t, Config{Store: store.Config{FileCompress: fc}}, compress.Spec{}) })
	}
	// Flow records (store.Config.Flows): one flow table update per packet.
	t.Run("flows", func(t *testing.T) { testBatchAllocs(t, Config{Store: store.Config{Flows: true}}, compress.Spec{}) })
	t.Run("flows-file-zstd", func(t *testing.T) {
		testBatchAllocs(t, Config{Store: store.Config{Flows: true, FileCompress: compress.Spec{Codec: compress.Zstd}}}, compress.Spec{})
	})
	t.Run("feed", func(t *testing.T) { testBatchAllocs(t, Config{Feed: nopFeed{}}, compress.Spec{}) })
	for _, sp := range []compress.Spec{{Codec: compress.LZ4}, {Codec: compress.S2}, {Codec: compress.Zstd}} {
		t.Run(sp.String(), func(t *testing.T) { testBatchAllocs(t, Config{}, sp) })
	}
	// With the metrics' latency observers: timing a batch and an fsync
	// allocates nothing either.
	var obs countObserver
	t.Run("observed", func(t *testing.T) {
		testBatchAllocs(t, Config{Store: store.Config{Fsync: store.FsyncPerBatch, SyncLatency: &obs}, BatchWriteLatency: &obs}, compress.Spec{})
	})
	if obs.n == 0 {
		t.Error("the observers were never called")
	}
}

// countObserver counts observations.
type countObserver struct{ n int }

func (o *countObserver) Observe(float64) { o.n++ }

func testBatchAllocs(t *testing.T, cfg Config, sp compress.Spec) {
	t.Helper()
	c := newCore(t, cfg)
	defer c.Close()
	s, _, err := c.begin(hello("a1", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.end(true)
	const runs, perBatch = 50, 1000
	type batch struct {
		flags   uint8
		payload []byte
	}
	batches := make([]batch, runs+2)
	for i := range batches {
		b := &batches[i]
		if sp.Codec == compress.None {
			b.payload = batchPayload(uint64(i+1), i*perBatch, perBatch)
		} else {
			b.flags, b.payload = compressedPayload(t, sp, uint64(i+1), i*perBatch, perBatch)
		}
	}
	next := 0
	allocs := testing.AllocsPerRun(runs, func() {
		dup, err := s.batch(batches[next].flags, batches[next].payload)
		next++
		if err != nil || dup {
			t.Fatalf("batch %d: dup %v, %v", next, dup, err)
		}
		if _, err := s.commit(); err != nil {
			t.Fatal(err)
		}
	})
	var want float64
	if allocs > want {
		t.Errorf("%v allocations per batch of %d packets, want at most %v", allocs, perBatch, want)
	}
}

type nopFeed struct{}

func (nopFeed) Batch(*BatchEvent) {}

// TestReadBatchSteadyStateAllocs: reading batch frames through a
// connection's reader (a buffer reserved from the read memory for each
// frame, from the pool, and given back), writing and committing them
// allocates nothing either.
func TestReadBatchSteadyStateAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	c := newCore(t, Config{})
	defer c.Close()
	s, _, err := c.begin(hello("a1", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	defer s.end(true)
	const runs = 50
	var stream []byte
	for i := range runs + 10 {
		p := batchPayload(uint64(i+1), i*100, 100+i%3*400)
		stream = append(wire.AppendHeader(stream, wire.TypeBatch, 0, uint32(len(p))), p...)
	}
	fr := wire.NewSharedFrameReader(bytes.NewReader(stream), c.limits(), c.mem)
	defer fr.Close()
	read := func() {
		h, p, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if dup, err := s.batch(h.Flags, p); err != nil || dup {
			t.Fatalf("dup %v, %v", dup, err)
		}
		fr.Release()
		if _, err := s.commit(); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 { // fill the pools
		read()
	}
	if allocs := testing.AllocsPerRun(runs, read); allocs != 0 {
		t.Errorf("%v allocations per frame read and written, want 0", allocs)
	}
	if st := c.ReadMemory(); st.Reserved != 0 {
		t.Errorf("read memory still reserved: %+v", st)
	}
}
