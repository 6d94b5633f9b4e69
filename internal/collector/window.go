package collector

import "math/bits"

// windowSize is how many sequence numbers below the highest one seen a
// datagram may arrive late and still be written. A gap older than that
// is counted lost for good.
const windowSize = 1024

// SeqCounts are what a stream of sequence-numbered datagrams (the UDP
// transport's batches) did, counted exactly.
type SeqCounts struct {
	Received   uint64 `json:"received"`   // batch datagrams that arrived, whatever became of them
	Lost       uint64 `json:"lost"`       // sequence numbers never received, once they can no longer arrive in time
	Reordered  uint64 `json:"reordered"`  // arrived after a higher sequence number, and written
	Duplicates uint64 `json:"duplicates"` // arrived before (or held before the session began), not written
	Late       uint64 `json:"late"`       // arrived more than windowSize below the highest: already counted lost, not written
}

// Add adds o's counts to c.
func (c *SeqCounts) Add(o SeqCounts) {
	c.Received += o.Received
	c.Lost += o.Lost
	c.Reordered += o.Reordered
	c.Duplicates += o.Duplicates
	c.Late += o.Late
}

// seqClass is what one sequence number is to a seqWindow.
type seqClass uint8

const (
	seqNew       seqClass = iota // above every one seen: write it
	seqReordered                 // below the highest, in the window, not seen: write it
	seqDuplicate                 // seen, or held before the session: drop it
	seqLate                      // below the window: counted lost already, drop it
)

// seqWindow classifies the sequence numbers of one agent instance's
// datagrams with a sliding bitmap of the last windowSize numbers, and
// counts them (SeqCounts). A number leaving the window unreceived is
// lost; finish counts the gaps still in it. It allocates nothing and
// its work per number is bounded, whatever jump a peer makes. Not safe
// for concurrent use.
type seqWindow struct {
	floor uint64 // numbers <= floor were held before this window began
	top   uint64 // highest number seen, floor before any
	seen  [windowSize / 64]uint64
	SeqCounts
}

// newSeqWindow returns a window for a stream of which every number up
// to floor is held already (the instance's high-water mark).
func newSeqWindow(floor uint64) seqWindow {
	w := seqWindow{floor: floor, top: floor}
	w.fill()
	return w
}

// fill marks the whole window seen: numbers at or below top that are
// not gaps (before the start, or counted already).
func (w *seqWindow) fill() {
	for i := range w.seen {
		w.seen[i] = ^uint64(0)
	}
}

func (w *seqWindow) bit(seq uint64) (word int, mask uint64) {
	i := seq % windowSize
	return int(i / 64), 1 << (i % 64)
}

// add classifies seq and counts it.
func (w *seqWindow) add(seq uint64) seqClass {
	w.Received++
	switch {
	case seq <= w.floor:
		w.Duplicates++
		return seqDuplicate
	case seq > w.top:
		w.advance(seq)
		return seqNew
	case w.top-seq >= windowSize:
		w.Late++
		return seqLate
	}
	i, m := w.bit(seq)
	if w.seen[i]&m != 0 {
		w.Duplicates++
		return seqDuplicate
	}
	w.seen[i] |= m
	w.Reordered++
	return seqReordered
}

// closed reports whether a datagram numbered seq can no longer be
// written: it was held before the session began, or its number is
// below the window (counted lost if it never came, late if it comes).
func (w *seqWindow) closed(seq uint64) bool {
	return seq <= w.floor || seq <= w.top && w.top-seq >= windowSize
}

// advance makes seq the highest number seen. Numbers leaving the window
// unseen are lost; a jump of a window or more clears it at once.
func (w *seqWindow) advance(seq uint64) {
	if gap := seq - w.top; gap >= windowSize {
		w.Lost += w.gaps() + (gap - windowSize)
		clear(w.seen[:])
	} else {
		for x := w.top + 1; x <= seq; x++ {
			i, m := w.bit(x) // the slot of x - windowSize, leaving
			if w.seen[i]&m == 0 {
				w.Lost++
			}
			w.seen[i] &^= m
		}
	}
	w.top = seq
	i, m := w.bit(seq)
	w.seen[i] |= m
}

// gaps counts the unseen numbers in the window.
func (w *seqWindow) gaps() uint64 {
	n := 0
	for _, x := range w.seen {
		n += bits.OnesCount64(x)
	}
	return uint64(windowSize - n)
}

// finish counts the gaps still open as lost (the stream ended: they
// will not arrive) and returns the counts. Numbers up to the highest
// seen count as held from then on.
func (w *seqWindow) finish() SeqCounts {
	w.Lost += w.gaps()
	w.fill()
	w.floor = w.top
	return w.SeqCounts
}
