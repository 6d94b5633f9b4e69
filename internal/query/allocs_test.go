package query

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/pcapsync/pcapsync/internal/raceflag"
)

// TestAllocationsConstant: a query's allocations do not grow with the
// number of packets it reads and writes once its reorder window is
// full: buffers are reused, the merge and the writers allocate nothing
// per packet, in one goroutine as with read-ahead, a producer per
// agent handing the merge batches and the output written by a
// goroutine (Config.Threads).
func TestAllocationsConstant(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector allocates")
	}
	for _, threads := range []int{1, 4} {
		t.Run(fmt.Sprintf("threads %d", threads), func(t *testing.T) { allocationsConstant(t, threads) })
	}
}

func allocationsConstant(t *testing.T, threads int) {
	allocs := func(batches int) (uint64, int64) {
		dir := t.TempDir()
		var bs [][]tp
		for b := range batches {
			var batch []tp
			for i := range 1000 {
				batch = append(batch, tp{ts: int64(b*1000+i) * 1000, iface: i % 2, port: 1})
			}
			bs = append(bs, batch)
		}
		writeAgent(t, dir, agentSpec{name: "m1", batches: bs}, 0)
		writeAgent(t, dir, agentSpec{name: "m2", comp: "zstd", batches: bs}, 1)
		cfg := Config{Dir: dir, ReorderMem: 1, Filter: "udp", Threads: threads}
		var out bytes.Buffer
		out.Grow(64 << 20)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		res, err := Run(context.Background(), cfg, &out)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		return after.Mallocs - before.Mallocs, res.Packets
	}
	small, np := allocs(20)
	large, nl := allocs(80)
	if nl != 4*np || np != 40000 {
		t.Fatalf("%d and %d packets", np, nl)
	}
	t.Logf("%d packets: %d allocations; %d packets: %d", np, small, nl, large)
	if large > small+200 {
		t.Errorf("allocations grow with the result: %d for %d packets, %d for %d", small, np, large, nl)
	}
}
