package index

import (
	"math"
	"testing"
)

// FuzzParse: Parse never panics nor allocates beyond its input's
// measure, and what it accepts holds its invariants: blocks in file
// order without overlap, times ordered, filters of the recorded size;
// an index accepted whole is accepted alike as a file being written,
// and a prefix read as a file being written yields a prefix of its
// blocks.
func FuzzParse(f *testing.F) {
	good := sample(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[:headerFixed])
	f.Add([]byte{})
	f.Add(append(append([]byte(nil), good...), 'B', 0xff, 0xff, 0xff, 0x7f))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, partial := range []bool{false, true} {
			ix, err := Parse(b, partial)
			if err != nil {
				continue
			}
			prev := int64(-1)
			for i, blk := range ix.All {
				if blk.Raw < prev || blk.RawEnd < blk.Raw || blk.First > blk.Last {
					t.Fatalf("block %d out of order: %+v", i, blk)
				}
				if len(blk.filter) > maxWords || 8*len(blk.filter) > len(b) {
					t.Fatalf("block %d: filter of %d words from %d bytes", i, len(blk.filter), len(b))
				}
				prev = blk.RawEnd
			}
			ix.Select(math.MinInt64, math.MaxInt64, Or(Port(1), And(Proto(6))))
			if !partial {
				p, err := Parse(b, true)
				if err != nil || len(p.All) != len(ix.All) || p.Final != ix.Final {
					t.Fatalf("accepted whole, but as a part: %v", err)
				}
			}
		}
	})
}
