package query

// window orders a stream's held packets by (ts, seq): those that come
// in order (at or after the last one queued) wait in a FIFO ring,
// the others in a heap; the least of the two heads is the least held.
// Files are in write order, mostly in time order, so most packets
// cost a ring append and pop instead of a heap's log n steps (which
// were a third of a whole-range export's CPU). The order given is the
// heap's alone would give: both parts are ordered by pktLess, which is
// total (seq is unique in a stream).
type window struct {
	ring   []pkt // ring[rh], ring[rh+1 mod len], ... rn of them, ordered
	rh, rn int
	h      minHeap[pkt]
}

func newWindow() window { return window{h: minHeap[pkt]{less: pktLess}} }

func (w *window) len() int { return w.rn + w.h.len() }

// entries is the capacity of the window's entries (ring and heap), what
// its memory counts.
func (w *window) entries() int { return len(w.ring) + cap(w.h.s) }

// push holds p, which comes after every packet pushed before in seq.
func (w *window) push(p pkt) {
	if e := w.slot(p.ts); e != nil {
		*e = p
		return
	}
	w.h.push(p)
}

// slot returns the ring's entry for a packet at ts that comes after
// every packet pushed before in seq, for the caller to fill, or nil
// when the packet is earlier than the ring's last one: then it is
// pushed (onto the heap). Filling the entry in place spares the copy
// of a pkt through the stack.
func (w *window) slot(ts int64) *pkt {
	if w.rn > 0 && ts < w.ring[(w.rh+w.rn-1)%len(w.ring)].ts {
		return nil
	}
	if w.rn == len(w.ring) {
		n := max(2*len(w.ring), 64)
		ring := make([]pkt, n)
		for i := range w.rn {
			ring[i] = w.ring[(w.rh+i)%len(w.ring)]
		}
		w.ring, w.rh = ring, 0
	}
	e := &w.ring[(w.rh+w.rn)%len(w.ring)]
	w.rn++
	return e
}

// fromRing reports whether the least packet held is the ring's head;
// the window must not be empty.
func (w *window) fromRing() bool {
	return w.h.len() == 0 || w.rn > 0 && pktLess(w.ring[w.rh], w.h.s[0])
}

// head is the least packet held; the window must not be empty.
func (w *window) head() *pkt {
	if w.fromRing() {
		return &w.ring[w.rh]
	}
	return &w.h.s[0]
}

// pop removes and returns the least packet held; the window must not
// be empty.
func (w *window) pop() pkt {
	var v pkt
	w.popInto(&v)
	return v
}

// popInto moves the least packet held to *dst; the window must not be
// empty.
func (w *window) popInto(dst *pkt) {
	if !w.fromRing() {
		*dst = w.h.pop()
		return
	}
	// Field by field, not *dst = w.ring[w.rh]: the entry was often
	// just filled (slot) a field at a time, and a copy in 16-byte moves
	// stalls on those stores (perf: some 8% of an export's CPU).
	e := &w.ring[w.rh]
	dst.ts, dst.seq, dst.out, dst.orig, dst.round, dst.data, dst.ck = e.ts, e.seq, e.out, e.orig, e.round, e.data, e.ck
	e.data, e.ck = nil, nil
	w.rh = (w.rh + 1) % len(w.ring)
	w.rn--
}

// each calls f with every packet held, in no order (tests).
func (w *window) each(f func(*pkt)) {
	for i := range w.rn {
		f(&w.ring[(w.rh+i)%len(w.ring)])
	}
	for i := range w.h.s {
		f(&w.h.s[i])
	}
}
