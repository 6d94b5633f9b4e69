package query

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/pcapsync/pcapsync/internal/index"
)

// disorderedBatches is n batches of per packets, in time order from
// one batch to the next but shuffled within each, every fifth batch
// reaching back into the one before it: disorder inside index blocks
// and across their edges, all within a window of a few batches.
func disorderedBatches(rng *rand.Rand, n, per int, step int64) [][]tp {
	var out [][]tp
	for b := range n {
		start := int64(b*per) * step
		if b%5 == 4 {
			start -= int64(per/2) * step
		}
		batch := make([]tp, per)
		for i := range batch {
			batch[i] = tp{ts: start + int64(i)*step + int64(rng.IntN(3)), iface: i % 2, port: uint16(5000 + i%3), pad: rng.IntN(900)}
		}
		rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		out = append(out, batch)
	}
	return out
}

// TestFloorReleasesEarly: with the indexes, a stream releases a packet
// once the index says no packet still to be read is older (stream.floor)
// instead of when its window is full, so the window holds about an index
// block, not its whole share; the output is byte for byte what the
// same query writes scanning the files (the window sorting everything),
// with and without producers, for plain, gzip and zstd files, whole
// and in a time range.
func TestFloorReleasesEarly(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(30, 8))
	for i, a := range []agentSpec{
		{name: "p1", rotate: 96 << 10, stats: true},
		{name: "g2", comp: "gzip", rotate: 96 << 10},
		{name: "z3", comp: "zstd", rotate: 96 << 10},
		{name: "o4", open: false}, // one file, many blocks
	} {
		a.ixBlock = 4096
		a.batches = disorderedBatches(rng, 60, 40, 1000)
		writeAgent(t, dir, a, i)
	}
	var mu sync.Mutex
	worst := map[string]int64{}
	testTaken = func(s *stream) {
		mu.Lock()
		worst[s.agent] = max(worst[s.agent], s.mem)
		mu.Unlock()
	}
	t.Cleanup(func() { testTaken = nil })
	for _, span := range []struct {
		name         string
		since, until int64
	}{{"whole", -1e9, 1e12}, {"range", 700_000, 1_900_000}} {
		var scanned []byte
		var scanWorst int64
		for _, c := range []struct {
			noIndex bool
			threads int
		}{{true, 1}, {false, 1}, {false, 2}} {
			clear(worst)
			cfg := Config{Dir: dir, Since: ts(span.since), Until: ts(span.until), NoIndex: c.noIndex, Threads: c.threads, ReorderMem: 64 << 20}
			out, res, err := runQuery(t, cfg)
			if err != nil {
				t.Fatalf("%s, no index %v, threads %d: %v", span.name, c.noIndex, c.threads, err)
			}
			pkts, _, _ := readOutput(t, out)
			if len(pkts) == 0 || !slices.IsSortedFunc(pkts, byTime) {
				t.Fatalf("%s: %d packets, not in time order", span.name, len(pkts))
			}
			most := max(worst["p1"], worst["g2"], worst["z3"], worst["o4"])
			t.Logf("%s, no index %v, threads %d: %d packets, %d indexed files, largest window %d KiB", span.name, c.noIndex, c.threads, res.Packets, res.FilesIndexed, most>>10)
			if c.noIndex {
				scanned, scanWorst = withoutComments(t, out), most
				continue
			}
			if res.FilesIndexed == 0 {
				t.Fatalf("%s: no file read through its index", span.name)
			}
			if !bytes.Equal(withoutComments(t, out), scanned) {
				t.Errorf("%s, threads %d: %d bytes, the scan wrote %d", span.name, c.threads, len(out), len(scanned))
			}
			// The scan holds every packet until the files are read;
			// through the indexes a window holds a few blocks.
			if most > 64<<10 || most*4 > scanWorst {
				t.Errorf("%s, threads %d: a window held %d bytes, %d scanning", span.name, c.threads, most, scanWorst)
			}
		}
	}
}

// TestFloorLyingIndex: an index whose blocks claim their first packet's
// time as their earliest, on a file whose packets come latest first
// within each batch (the probe of each block's first packet agrees),
// makes a stream release packets early that a later one is older than:
// the query stops with ErrOutOfOrder, what it wrote in time order; it
// never writes a packet out of order.
func TestFloorLyingIndex(t *testing.T) {
	dir := t.TempDir()
	var batches [][]tp
	for b := range 30 {
		var batch []tp
		for i := 40; i > 0; i-- { // latest first
			batch = append(batch, tp{ts: int64(b*40+i) * 1000, port: 5000})
		}
		batches = append(batches, batch)
	}
	writeAgent(t, dir, agentSpec{name: "l1", batches: batches, ixBlock: 4096}, 0)
	data := onlyFile(t, dir, "l1", "*.pcapng")
	ix, err := index.Open(data)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	lies, i := 0, 0
	reseal(t, index.Path(data), func(p []byte) []byte {
		b := ix.All[i]
		i++
		body := raw[b.Raw+8:]
		first := int64(le.Uint32(body[4:]))<<32 | int64(le.Uint32(body[8:]))
		if first > b.First {
			lies++
		}
		le.PutUint64(p[24:], uint64(first))
		return p
	})
	if lies == 0 {
		t.Fatal("no block's first packet is later than its earliest: nothing to lie about")
	}
	for _, threads := range []int{1, 2} {
		out, res, err := runQuery(t, Config{Dir: dir, Threads: threads, ReorderMem: 64 << 20})
		if res.FilesIndexed == 0 {
			t.Fatalf("threads %d: the forged index was not used (%+v, %v)", threads, res, err)
		}
		if !errors.Is(err, ErrOutOfOrder) {
			t.Errorf("threads %d: %v, want ErrOutOfOrder", threads, err)
		}
		pkts, _, _ := readOutput(t, out)
		if !slices.IsSortedFunc(pkts, byTime) {
			t.Errorf("threads %d: %d packets written out of order", threads, len(pkts))
		}
	}
}

func byTime(a, b got) int { return cmp.Compare(a.TS, b.TS) }
