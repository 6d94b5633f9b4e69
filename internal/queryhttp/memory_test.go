package queryhttp

import (
	"context"
	"io"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/raceflag"
)

// queryMem is the documented bound of one query's memory (docs/query.md):
// the reorder window (reorderMem shared by the agents, at least 256 KiB
// each), per agent its reader's buffers (the pcapng reader's and the
// 64 KiB under the decoders; the files here are not compressed), and the
// output's 256 KiB buffer.
func queryMem(reorderMem int64, agents int) int64 {
	window := max(reorderMem, int64(agents)*256<<10)
	return window + int64(agents)*(pcapfile.ReaderBufferSize+64<<10) + 256<<10
}

// TestMemoryBound: 50 broad queries at once (--query-max 50) over agents
// whose files rotate, packets of sizes that keep changing, take no more
// than 50 times a query's documented bound, and the collector's slack
// on what little garbage they make: the heap in use (runtime/metrics:
// the objects allocated and not yet freed, as the default GOGC lets
// them grow) peaks within 1.5 times the bound (0.8 to 1.25 here; buffers
// made anew per file and kept per size took it to 3).
func TestMemoryBound(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector allocates")
	}
	const (
		queries    = 50
		agents     = 4
		reorderMem = 1 << 20
	)
	dir := writeFiles(t, 64<<10, 2500, "m1", "m2", "m3", "m4") // 1 MB, 16 files per agent
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, MaxQueries: queries, ReorderMem: reorderMem})
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	runtime.GC()
	metrics.Read(heap)
	base := heap[0].Value.Uint64()
	var peak uint64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		s := []metrics.Sample{{Name: heap[0].Name}}
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var wg sync.WaitGroup
	results := make(chan int64, queries)
	for range queries {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := Fetch(context.Background(), ClientConfig{Addr: s.Addr()}, io.Discard)
			if err != nil {
				t.Error(err)
			}
			results <- res.Packets
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(results)
	for n := range results {
		if n != agents*2500 {
			t.Fatalf("a query gave %d packets, want %d", n, agents*2500)
		}
	}
	bound := uint64(queries * queryMem(reorderMem, agents))
	t.Logf("heap in use: %d MiB before, peak %d MiB above it; %d queries' bound %d MiB", base>>20, (peak-base)>>20, queries, bound>>20)
	if peak-base > bound*3/2 {
		t.Errorf("heap in use peaked %d MiB above the %d MiB before the queries: more than 1.5 times %d queries' bound of %d MiB",
			(peak-base)>>20, base>>20, queries, bound>>20)
	}
}
