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

// TestBufAfterDrain: once a window has drained at once (the early
// release, stream.floor), its free lists are as long as it held
// packets; a full window whose packets' sizes then alternate between
// two classes reuses the buffers it releases and makes none. Counting
// the lists' entries against the limit dropped the buffer just
// released and made a new one for every packet.
func TestBufAfterDrain(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector allocates")
	}
	const limit = minStreamMem
	s := &stream{limit: limit, slack: freeSlack(limit)}
	take := func(n int) []byte {
		b := s.buf(n)
		s.mem += int64(cap(b))
		return b
	}
	var held [][]byte
	for s.mem < limit { // a window of small packets, released at once
		held = append(held, take(100))
	}
	for _, b := range held {
		s.release(&pkt{data: b})
	}
	if s.listMem <= s.slack {
		t.Fatalf("the free lists' entries take %d bytes, the slack is %d: the drain does not test them", s.listMem, s.slack)
	}
	// Full again, of packets alternating between two classes, an odd
	// number of them: each packet released is of the other class than
	// the one read next.
	held = held[:0]
	size := func(i int) int { return 100 + 100*(i%2) }
	i := 0
	for s.mem < limit || len(held)%2 == 0 {
		held = append(held, take(size(i)))
		i++
	}
	oldest := 0
	step := func() { // a ring: the test itself allocates nothing
		s.release(&pkt{data: held[oldest]})
		held[oldest] = take(size(i))
		oldest = (oldest + 1) % len(held)
		i++
	}
	step()
	step()
	if n := testing.AllocsPerRun(1000, step); n > 0.01 {
		t.Errorf("%.2f allocations a packet in a full window after a drain", n)
	}
}
