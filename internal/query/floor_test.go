package query

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
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
	return floorBatches(rng, n, per, func(b, i int) int64 {
		start := int64(b*per) * step
		if b%5 == 4 {
			start -= int64(per/2) * step
		}
		return start + int64(i)*step + int64(rng.IntN(3))
	}, func(int) bool { return true })
}

// inOrderBatches is n batches of per packets in time order, two at
// each time, but for every seventh batch, shuffled, when some is set.
func inOrderBatches(rng *rand.Rand, n, per int, step int64, some bool) [][]tp {
	return floorBatches(rng, n, per, func(b, i int) int64 { return int64((b*per+i)/2) * step },
		func(b int) bool { return some && b%7 == 3 })
}

// floorBatches is n batches of per packets at times at(batch, i), on
// two interfaces and three ports, of random sizes, batch b shuffled
// when shuffle(b).
func floorBatches(rng *rand.Rand, n, per int, at func(b, i int) int64, shuffle func(b int) bool) [][]tp {
	var out [][]tp
	for b := range n {
		batch := make([]tp, per)
		for i := range batch {
			batch[i] = tp{ts: at(b, i), iface: i % 2, port: uint16(5000 + i%3), pad: rng.IntN(900)}
		}
		if shuffle(b) {
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
		}
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
	floorSameAsScan(t, dir, func(where string, worst, scanWorst map[string]int64) {
		// The scan holds every packet until the files are read;
		// through the indexes a window holds a few blocks.
		most := max(worst["p1"], worst["g2"], worst["z3"], worst["o4"])
		scan := max(scanWorst["p1"], scanWorst["g2"], scanWorst["z3"], scanWorst["o4"])
		if most > 64<<10 || most*4 > scan {
			t.Errorf("%s: a window held %d bytes, %d scanning", where, most, scan)
		}
	})
}

// floorSameAsScan queries dir whole and in a time range, scanning the
// files (--no-index) and through their indexes with and without
// producers: the output through the indexes must be the scan's, byte
// for byte; check is given, for each query through the indexes, the
// largest window of each agent and the scan's.
func floorSameAsScan(t *testing.T, dir string, check func(where string, worst, scanWorst map[string]int64)) {
	t.Helper()
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
		var scanWorst map[string]int64
		for _, c := range []struct {
			noIndex bool
			threads int
		}{{true, 1}, {false, 1}, {false, 2}} {
			clear(worst)
			cfg := Config{Dir: dir, Since: ts(span.since), Until: ts(span.until), NoIndex: c.noIndex, Threads: c.threads, ReorderMem: 64 << 20}
			out, res, err := runQuery(t, cfg)
			where := fmt.Sprintf("%s, no index %v, threads %d", span.name, c.noIndex, c.threads)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			pkts, _, _ := readOutput(t, out)
			if len(pkts) == 0 || !slices.IsSortedFunc(pkts, byTime) {
				t.Fatalf("%s: %d packets, not in time order", where, len(pkts))
			}
			t.Logf("%s: %d packets, %d indexed files, largest windows %v", where, res.Packets, res.FilesIndexed, worst)
			if c.noIndex {
				scanned, scanWorst = withoutComments(t, out), maps.Clone(worst)
				continue
			}
			if res.FilesIndexed == 0 {
				t.Fatalf("%s: no file read through its index", where)
			}
			if !bytes.Equal(withoutComments(t, out), scanned) {
				t.Errorf("%s: %d bytes, the scan wrote %d", where, len(out), len(scanned))
			}
			check(where, worst, scanWorst)
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
	dir, data := latestFirst(t)
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
	stopsOutOfOrder(t, dir)
}

// latestFirst writes an agent whose packets come latest first within
// each batch, in index blocks of 4 KiB, and returns the root and its
// only data file.
func latestFirst(t *testing.T) (dir, data string) {
	dir = t.TempDir()
	var batches [][]tp
	for b := range 30 {
		var batch []tp
		for i := 40; i > 0; i-- {
			batch = append(batch, tp{ts: int64(b*40+i) * 1000, port: 5000})
		}
		batches = append(batches, batch)
	}
	writeAgent(t, dir, agentSpec{name: "l1", batches: batches, ixBlock: 4096}, 0)
	return dir, onlyFile(t, dir, "l1", "*.pcapng")
}

// stopsOutOfOrder checks that a query of dir through its indexes, with
// and without producers, stops with ErrOutOfOrder, what it wrote in
// time order.
func stopsOutOfOrder(t *testing.T, dir string) {
	t.Helper()
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

// TestFloorOrderedBlocks: a block its index says is in time order
// (index.Block.Ordered, which the store's index builder sets) lets a
// stream release each of its packets as soon as it is read, so the
// window of an agent whose files are in order holds a packet or two
// instead of an index block; blocks out of order are held whole as
// before. The output is byte for byte the scan's, with and without
// producers, for plain, gzip and zstd files, whole and in a time range.
func TestFloorOrderedBlocks(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(30, 9))
	const block = 64 << 10
	specs := []agentSpec{
		{name: "s1", rotate: 256 << 10, stats: true},
		{name: "g2", comp: "gzip", rotate: 256 << 10},
		{name: "z3", comp: "zstd"},
		{name: "m4"}, // some blocks shuffled
	}
	for i, a := range specs {
		a.ixBlock = block
		a.batches = inOrderBatches(rng, 60, 40, 1000, a.name == "m4")
		writeAgent(t, dir, a, i)
	}
	// The store's indexes say which blocks are in order.
	for _, a := range specs {
		ordered, all := 0, 0
		for _, pattern := range []string{"*.pcapng", "*.pcapng.gz", "*.pcapng.zst"} {
			files, _ := filepath.Glob(filepath.Join(dir, a.name, pattern))
			for _, f := range files {
				ix, err := index.Open(f)
				if err != nil {
					t.Fatal(err)
				}
				for _, b := range ix.All {
					if b.Packets > 0 {
						all++
						if b.Ordered {
							ordered++
						}
					}
				}
			}
		}
		if want := all; a.name == "m4" && (ordered == 0 || ordered == all) || a.name != "m4" && ordered != want || all < 4 {
			t.Fatalf("%s: %d of %d blocks ordered", a.name, ordered, all)
		}
	}
	floorSameAsScan(t, dir, func(where string, worst, _ map[string]int64) {
		// In order: the ring's first 64 entries and a packet or two;
		// m4 holds a shuffled block whole.
		for _, a := range []string{"s1", "g2", "z3"} {
			if worst[a] > 64*entrySize+2*1024 {
				t.Errorf("%s: %s's window held %d bytes", where, a, worst[a])
			}
		}
		if worst["m4"] < block/2 {
			t.Errorf("%s: m4's window held at most %d bytes, less than its shuffled blocks", where, worst["m4"])
		}
	})
}

// TestFloorLyingOrdered: an index that says every block is in time
// order, on a file whose packets come latest first within each batch,
// makes a stream release packets that a later one is older than: the
// query stops with ErrOutOfOrder, what it wrote in time order.
func TestFloorLyingOrdered(t *testing.T) {
	dir, data := latestFirst(t)
	le := binary.LittleEndian
	reseal(t, index.Path(data), func(p []byte) []byte {
		if le.Uint32(p[40:])&(1<<31) != 0 {
			t.Fatal("the store's index says a block latest first is in order")
		}
		le.PutUint32(p[40:], le.Uint32(p[40:])|1<<31)
		return p
	})
	stopsOutOfOrder(t, dir)
}
