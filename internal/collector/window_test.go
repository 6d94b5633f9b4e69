package collector

import (
	"math"
	"testing"
)

// seqs returns first, first+1, ..., last.
func seqs(first, last uint64) []uint64 {
	var s []uint64
	for x := first; x <= last; x++ {
		s = append(s, x)
	}
	return s
}

func cat(parts ...[]uint64) []uint64 {
	var s []uint64
	for _, p := range parts {
		s = append(s, p...)
	}
	return s
}

func TestSeqWindow(t *testing.T) {
	const W = windowSize
	tests := []struct {
		name  string
		floor uint64
		in    []uint64
		write int       // numbers classified new or reordered
		live  SeqCounts // before finish
		want  SeqCounts // after finish
	}{
		{name: "in order", in: seqs(1, 5000), write: 5000,
			live: SeqCounts{Received: 5000}, want: SeqCounts{Received: 5000}},
		{name: "one lost, still in the window", in: cat(seqs(1, 9), seqs(11, 20)), write: 19,
			live: SeqCounts{Received: 19}, want: SeqCounts{Received: 19, Lost: 1}},
		{name: "one lost, out of the window", in: cat(seqs(1, 9), seqs(11, 10+W)), write: 9 + W,
			live: SeqCounts{Received: 9 + W, Lost: 1}, want: SeqCounts{Received: 9 + W, Lost: 1}},
		{name: "lost at the start", in: seqs(4, 10), write: 7,
			live: SeqCounts{Received: 7}, want: SeqCounts{Received: 7, Lost: 3}},
		{name: "a loss after the last one is invisible", in: seqs(1, 10), write: 10,
			live: SeqCounts{Received: 10}, want: SeqCounts{Received: 10}},
		{name: "swapped", in: []uint64{1, 3, 2, 4, 6, 5}, write: 6,
			live: SeqCounts{Received: 6, Reordered: 2}, want: SeqCounts{Received: 6, Reordered: 2}},
		{name: "reordered across most of the window", in: cat(seqs(2, W), []uint64{1}), write: W,
			live: SeqCounts{Received: W, Reordered: 1}, want: SeqCounts{Received: W, Reordered: 1}},
		{name: "too late", in: cat(seqs(2, W+1), []uint64{1}), write: W,
			live: SeqCounts{Received: W + 1, Lost: 1, Late: 1}, want: SeqCounts{Received: W + 1, Lost: 1, Late: 1}},
		{name: "duplicates", in: []uint64{1, 2, 2, 3, 1, 3, 3}, write: 3,
			live: SeqCounts{Received: 7, Duplicates: 4}, want: SeqCounts{Received: 7, Duplicates: 4}},
		{name: "duplicate of a reordered one", in: []uint64{2, 1, 1}, write: 2,
			live: SeqCounts{Received: 3, Reordered: 1, Duplicates: 1}, want: SeqCounts{Received: 3, Reordered: 1, Duplicates: 1}},
		{name: "held before the session", floor: 100, in: []uint64{99, 100, 101, 50, 102}, write: 2,
			live: SeqCounts{Received: 5, Duplicates: 3}, want: SeqCounts{Received: 5, Duplicates: 3}},
		{name: "gap after the floor", floor: 100, in: []uint64{105}, write: 1,
			live: SeqCounts{Received: 1}, want: SeqCounts{Received: 1, Lost: 4}},
		{name: "far jump", in: []uint64{1, 2, 3 + 10*W}, write: 3,
			live: SeqCounts{Received: 3, Lost: 9*W + 1}, want: SeqCounts{Received: 3, Lost: 10 * W}},
		{name: "far jump, then the gap fills in the window", in: cat([]uint64{1, 2, 3 + 10*W}, seqs(4+9*W, 2+10*W)), write: 2 + W,
			live: SeqCounts{Received: 2 + W, Lost: 9*W + 1, Reordered: W - 1}, want: SeqCounts{Received: 2 + W, Lost: 9*W + 1, Reordered: W - 1}},
		{name: "jump of exactly a window", in: []uint64{1, 2 + W}, write: 2,
			live: SeqCounts{Received: 2, Lost: 1}, want: SeqCounts{Received: 2, Lost: W}},
		{name: "jump to the last number", in: []uint64{1, math.MaxUint64}, write: 2,
			live: SeqCounts{Received: 2, Lost: math.MaxUint64 - 1 - W}, want: SeqCounts{Received: 2, Lost: math.MaxUint64 - 2}},
		{name: "nothing", want: SeqCounts{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newSeqWindow(tc.floor)
			written := 0
			for _, s := range tc.in {
				if c := w.add(s); c == seqNew || c == seqReordered {
					written++
				}
			}
			if written != tc.write {
				t.Errorf("%d written, want %d", written, tc.write)
			}
			if w.SeqCounts != tc.live {
				t.Errorf("counts %+v, want %+v", w.SeqCounts, tc.live)
			}
			if got := w.finish(); got != tc.want {
				t.Errorf("after finish %+v, want %+v", got, tc.want)
			}
			if got := w.finish(); got != tc.want {
				t.Errorf("finish twice %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestSeqWindowRestart: an agent restarted with a new instance id starts
// at sequence 1 again in a new window; the old window's gaps are lost
// when it finishes, and the new one counts from scratch.
func TestSeqWindowRestart(t *testing.T) {
	old := newSeqWindow(0)
	for _, s := range []uint64{1, 2, 4, 5} {
		old.add(s)
	}
	if got := old.finish(); got != (SeqCounts{Received: 4, Lost: 1}) {
		t.Fatalf("old instance: %+v", got)
	}
	nw := newSeqWindow(0)
	for _, s := range []uint64{1, 2, 3} {
		if c := nw.add(s); c != seqNew {
			t.Fatalf("new instance: seq %d is %d, want new", s, c)
		}
	}
	var total SeqCounts
	total.Add(old.SeqCounts)
	total.Add(nw.finish())
	if total != (SeqCounts{Received: 7, Lost: 1}) {
		t.Fatalf("per agent: %+v", total)
	}
}

// TestSeqWindowExact checks the counts against a plain set on a long
// stream with losses, swaps, duplicates and a late straggler.
func TestSeqWindowExact(t *testing.T) {
	w := newSeqWindow(0)
	seen := map[uint64]bool{}
	var in []uint64
	for s := uint64(1); s <= 20000; s++ {
		switch {
		case s%97 == 0: // lost
		case s%53 == 0: // duplicated
			in = append(in, s, s)
		default:
			in = append(in, s)
		}
	}
	for i := 31; i < len(in); i += 31 { // swapped with the one before
		in[i-1], in[i] = in[i], in[i-1]
	}
	wrote := 0
	for _, s := range in {
		if c := w.add(s); c == seqNew || c == seqReordered {
			if seen[s] {
				t.Fatalf("seq %d written twice", s)
			}
			seen[s] = true
			wrote++
		}
	}
	got := w.finish()
	var top uint64
	for s := range seen {
		top = max(top, s)
	}
	if got.Lost != top-uint64(len(seen)) || got.Received != uint64(len(in)) || got.Duplicates != uint64(len(in)-wrote) {
		t.Fatalf("counts %+v; %d distinct of %d, %d datagrams", got, len(seen), top, len(in))
	}
}
