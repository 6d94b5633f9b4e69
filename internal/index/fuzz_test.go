package index

import (
	"bytes"
	"math"
	"runtime"
	"testing"
)

// FuzzParse: Parse never panics nor allocates beyond a small multiple
// of its input, and what it accepts holds its invariants: blocks in
// file order without overlap, times ordered, filters of the recorded
// size; an index accepted whole is accepted alike as a file being
// written, and encodes back (Append) to the same bytes; a prefix read
// as a file being written encodes to a prefix of the input. An index
// that Check accepts for a data file has every block within it. The
// input, read as packets, also drives a Builder: what it builds parses
// whole, round-trips, and its filters hold every key of its packets
// (every bit set for a packet of a link type not keyed).
func FuzzParse(f *testing.F) {
	good := sample(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:headerFixed])
	f.Add([]byte{})
	f.Add(append(append([]byte(nil), good...), 'B', 0xff, 0xff, 0xff, 0x7f))
	f.Add(bytes.Repeat([]byte{0xff}, 300))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, partial := range []bool{false, true} {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			ix, err := Parse(b, partial)
			runtime.ReadMemStats(&after)
			if n := after.TotalAlloc - before.TotalAlloc; n > uint64(4*len(b)+64<<10) {
				t.Fatalf("Parse of %d bytes allocated %d", len(b), n)
			}
			if err != nil {
				continue
			}
			checkParsed(t, b, ix, partial)
		}
		checkBuilt(t, b)
	})
}

// checkParsed checks the invariants of ix, parsed from b.
func checkParsed(t *testing.T, b []byte, ix *Index, partial bool) {
	t.Helper()
	prev := int64(-1)
	for i, blk := range ix.All {
		if blk.Raw < prev || blk.RawEnd < blk.Raw || blk.First > blk.Last || blk.Seek < 0 {
			t.Fatalf("block %d out of order: %+v", i, blk)
		}
		if len(blk.filter) > maxWords || 8*len(blk.filter) > len(b) {
			t.Fatalf("block %d: filter of %d words from %d bytes", i, len(blk.filter), len(b))
		}
		prev = blk.RawEnd
	}
	ix.Select(math.MinInt64, math.MaxInt64, Or(Port(1), And(Proto(6))))
	enc := ix.Append(nil)
	if !partial {
		if !bytes.Equal(enc, b) {
			t.Fatalf("accepted whole, encodes to %d bytes of %d", len(enc), len(b))
		}
		p, err := Parse(b, true)
		if err != nil || len(p.All) != len(ix.All) || p.Final != ix.Final {
			t.Fatalf("accepted whole, but as a part: %v", err)
		}
	} else if !bytes.HasPrefix(b, enc) {
		t.Fatalf("read as a part, encodes to %d bytes that do not start the input", len(enc))
	}
	// Whatever size of data file Check accepts, the blocks lie in it.
	for _, size := range []int64{ix.DataSize, int64(len(b)), 1 << 20} {
		if ix.Check(ix.Name, size, partial) != nil {
			continue
		}
		if ix.Final {
			size = ix.DataSize
		}
		last := int64(0)
		for i, blk := range ix.All {
			if blk.Seek < last || ix.Codec != CodecZstd && blk.Seek >= max(size, 1) || ix.Codec == CodecNone && blk.RawEnd > size {
				t.Fatalf("Check accepted block %d %+v of a %d-byte data file", i, blk, size)
			}
			last = blk.Seek
		}
	}
}

// checkBuilt reads b as packets of a few link types, builds their index
// and checks it.
func checkBuilt(t *testing.T, b []byte) {
	t.Helper()
	var bl Builder
	bl.Reset("f.pcapng", CodecNone, 1, 4096, 100, 100)
	links := []uint32{linkEthernet, linkRaw, linkSLL, linkSLL2, linkNull, linkLoop, linkIPv4, linkIPv6, 105}
	type pkt struct {
		block int
		lt    uint32
		data  []byte
	}
	var pkts []pkt
	raw := int64(100)
	for i := 0; len(b) > 0; i++ {
		n := min(len(b), 20+int(b[0])%80)
		p := pkt{block: bl.Blocks(), lt: links[i%len(links)], data: b[:n]}
		bl.Add(p.lt, int64(i), p.data)
		pkts = append(pkts, p)
		b = b[n:]
		raw += int64(n) + 32
		if i%3 == 2 {
			bl.EndBlock(raw, 1, raw)
		}
	}
	bl.Finish(raw, 1, raw, raw)
	enc := bl.Pending()
	ix, err := Parse(enc, false)
	if err != nil {
		t.Fatalf("a built index does not parse: %v", err)
	}
	if again := ix.Append(nil); !bytes.Equal(again, enc) {
		t.Fatalf("a built index encodes back to %d bytes of %d", len(again), len(enc))
	}
	if err := ix.Check("f.pcapng", raw, false); err != nil {
		t.Fatalf("a built index does not check: %v", err)
	}
	var s keySet
	for _, p := range pkts {
		blk := &ix.All[p.block]
		s.reset()
		packetKeys(&s, p.lt, p.data)
		if s.wild && !saturated(blk.filter) {
			t.Fatalf("block %d: a packet of link type %d, not keyed, in a filter not full", p.block, p.lt)
		}
		for _, k := range s.slots {
			if k != 0 && !bloomHas(blk.filter, k, probes(len(blk.filter), blk.Keys)) {
				t.Fatalf("block %d: a key of its packet is not in its filter", p.block)
			}
		}
	}
}
