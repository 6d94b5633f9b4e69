package query

import (
	"math/rand/v2"
	"testing"
)

// TestWindowOrder: the window (a ring for the packets that come in
// order, a heap for the others) gives packets in the order a heap
// alone gives them, (timestamp, sequence), for sequences in order,
// reversed, of interleaved batches, random and with ties, pops mixed
// with pushes.
func TestWindowOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gens := map[string]func(i int) int64{
		"in order":    func(i int) int64 { return int64(i) },
		"reversed":    func(i int) int64 { return int64(-i) },
		"ties":        func(i int) int64 { return int64(i / 7) },
		"batches":     func(i int) int64 { return int64(i%64 + (i/128)*64) }, // two interfaces' batches interleaved
		"random":      func(int) int64 { return r.Int64N(1000) },
		"mostly":      func(i int) int64 { return int64(i) - r.Int64N(3)*int64(r.IntN(20)/19*50) },
		"steps back":  func(i int) int64 { return int64(i%500) * 3 },
		"equal times": func(int) int64 { return 5 },
	}
	for name, gen := range gens {
		w := newWindow()
		ref := minHeap[pkt]{less: pktLess}
		var seq uint64
		var got, want []uint64
		for i := range 5000 {
			p := pkt{ts: gen(i), seq: seq}
			seq++
			w.push(p)
			ref.push(p)
			for r.IntN(3) == 0 && ref.len() > 0 {
				got = append(got, w.pop().seq)
				want = append(want, ref.pop().seq)
			}
			if w.len() != ref.len() || w.len() > 0 && w.head().seq != ref.s[0].seq {
				t.Fatalf("%s: after %d pushes the window holds %d, head %+v; a heap %d", name, i+1, w.len(), w.head(), ref.len())
			}
		}
		for ref.len() > 0 {
			got = append(got, w.pop().seq)
			want = append(want, ref.pop().seq)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: packet %d of the output is seq %d, a heap gives %d", name, i, got[i], want[i])
			}
		}
		if w.len() != 0 {
			t.Errorf("%s: %d left", name, w.len())
		}
	}
}
