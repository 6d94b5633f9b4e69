package collector

import (
	"fmt"
	"slices"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Reassembly of batches sent in pieces (the UDP transport; see
// wire.AppendPiece). Each piece is a datagram with its own sequence
// number, classified by the session's seqWindow like any other (lost,
// reordered, duplicate, late), so duplicates never reach a reassembly.
// A batch is written once all its pieces arrived and the frame they
// make checks out (its CRC-32C, its seq equal to the pieces' first);
// else the whole of it is counted malformed.
//
// Memory is bounded twice, and nothing is allocated for a piece before
// it passed wire.ParsePiece (its frame within MaxFrame and the budget)
// and the session's checks (the same count and total as the batch's
// other pieces, no overlap with another batch in progress):
//   - per session, at most udpMaxInProgress batches: a new one beyond
//     drops the session's oldest;
//   - over all sessions, Config.UDPReassemblyBytes, each batch counting
//     its whole frame from its first piece on: a new one beyond drops
//     the oldest anywhere (UDPCounters.Evicted).
//
// An incomplete batch expires when a piece it lacks can no longer
// arrive in time: its number left the window (it was counted lost, and
// would be late), or the session ended. Dropped batches, whatever the
// reason, are counted per agent (UDPAgentCounts.Incomplete). A piece
// of a batch whose first number is below the window when it arrives
// (a batch longer than the window, or reordered that far) is dropped
// without a reassembly: it can never complete.

// udpMaxInProgress bounds the batches one UDP session puts back
// together at once. Under loss, batches missing a piece linger until
// their gap leaves the window; the oldest is nearly always such a one.
const udpMaxInProgress = 8

// reassembly is one batch being put back together.
type reassembly struct {
	peer  *udpPeer
	first uint64
	count uint32
	total uint32
	got   uint32   // pieces arrived
	low   uint32   // every piece below low arrived
	have  []uint64 // bitmap of arrived pieces
	buf   []byte   // the frame, total bytes

	prev, next *reassembly // UDPServer's list, oldest first
}

// has reports whether piece i arrived.
func (r *reassembly) has(i uint32) bool { return r.have[i/64]&(1<<(i%64)) != 0 }

// missingSeq returns the lowest sequence number of a piece not arrived.
func (r *reassembly) missingSeq() uint64 { return r.first + uint64(r.low) }

// reassemblyKeep bounds the buffers kept for reuse, in number and size.
const (
	reassemblyKeep    = 16
	reassemblyKeepCap = 256 << 10
)

// piece handles a piece of p's session: it is counted by the window,
// kept, and once its batch is complete the batch is written. u.mu is
// held.
func (u *UDPServer) piece(p *udpPeer, pc *wire.Piece) (wrote bool, err error) {
	r := p.reassembly(pc.First)
	switch {
	case r != nil && (r.count != pc.Count || r.total != pc.Total):
		return false, fmt.Errorf("piece %d of batch %d: %d pieces of a %d-byte frame, its other pieces said %d of %d: %w",
			pc.Index, pc.First, pc.Count, pc.Total, r.count, r.total, wire.ErrMalformed)
	case r == nil:
		if o := p.overlapping(pc.First, pc.Count); o != nil {
			return false, fmt.Errorf("piece of batch %d (%d pieces) overlaps batch %d (%d pieces): %w",
				pc.First, pc.Count, o.first, o.count, wire.ErrMalformed)
		}
	}
	p.pieces++
	if !u.admit(p, pc.Seq()) {
		return false, nil
	}
	if r = p.reassembly(pc.First); r == nil {
		if p.win.closed(pc.First) {
			return false, nil // piece 0 can no longer be written: nor can this batch
		}
		r = u.begin(p, pc)
	}
	off, n := wire.PieceSpan(r.total, r.count, pc.Index)
	copy(r.buf[off:off+n], pc.Data)
	r.have[pc.Index/64] |= 1 << (pc.Index % 64)
	r.got++
	for r.low < r.count && r.has(r.low) {
		r.low++
	}
	if r.got < r.count {
		return false, nil
	}
	u.unlink(r)
	defer u.release(r)
	h, payload, rest, err := wire.NextFrame(r.buf, u.core.limits())
	switch {
	case err != nil:
		return false, fmt.Errorf("batch %d put together from %d pieces: %w", r.first, r.count, err)
	case h.Type != wire.TypeBatch || len(rest) != 0:
		return false, fmt.Errorf("batch %d put together from %d pieces: a %s frame and %d bytes more: %w", r.first, r.count, h.Type, len(rest), wire.ErrMalformed)
	}
	b, err := wire.ParseBatch(h.Flags, payload, wire.BatchLimits{})
	if err != nil {
		return false, fmt.Errorf("batch %d put together from %d pieces: %w", r.first, r.count, err)
	}
	if b.Seq != r.first {
		return false, fmt.Errorf("batch %d put together from pieces numbered from %d: %w", b.Seq, r.first, wire.ErrMalformed)
	}
	p.reassembled++
	return u.write(p, &b, h.Flags, payload)
}

// reassembly returns p's batch in progress whose first number is
// first, or nil.
func (p *udpPeer) reassembly(first uint64) *reassembly {
	for _, r := range p.rs {
		if r.first == first {
			return r
		}
	}
	return nil
}

// overlapping returns a batch in progress of p whose numbers overlap
// first..first+count-1, or nil.
func (p *udpPeer) overlapping(first uint64, count uint32) *reassembly {
	last := first + uint64(count) - 1 // wire.ParsePiece checked it does not overflow
	for _, r := range p.rs {
		if first <= r.first+uint64(r.count)-1 && r.first <= last {
			return r
		}
	}
	return nil
}

// begin starts putting pc's batch together, first dropping p's oldest
// batch in progress if p has too many, and the oldest anywhere while
// the new one would exceed the budget.
func (u *UDPServer) begin(p *udpPeer, pc *wire.Piece) *reassembly {
	if len(p.rs) >= udpMaxInProgress {
		u.drop(p.rs[0])
	}
	for u.rsHead != nil && u.rsBytes+int64(pc.Total) > u.core.cfg.UDPReassemblyBytes {
		u.Counters.Evicted.Add(1)
		u.drop(u.rsHead)
	}
	var r *reassembly
	for i := len(u.rsFree) - 1; i >= 0; i-- {
		if cap(u.rsFree[i].buf) >= int(pc.Total) {
			r = u.rsFree[i]
			u.rsFree = slices.Delete(u.rsFree, i, i+1)
			break
		}
	}
	words := (int(pc.Count) + 63) / 64
	if r == nil {
		r = &reassembly{buf: make([]byte, pc.Total)}
	}
	if cap(r.have) < words {
		r.have = make([]uint64, words)
	}
	*r = reassembly{peer: p, first: pc.First, count: pc.Count, total: pc.Total,
		have: r.have[:words], buf: r.buf[:pc.Total]}
	clear(r.have)
	p.rs = append(p.rs, r)
	r.prev = u.rsTail
	if u.rsTail != nil {
		u.rsTail.next = r
	} else {
		u.rsHead = r
	}
	u.rsTail = r
	u.rsBytes += int64(r.total)
	u.Counters.ReassemblyBytes.Store(u.rsBytes)
	return r
}

// expire drops p's batches in progress that lack a piece whose number
// left the window.
func (u *UDPServer) expire(p *udpPeer) {
	for i := 0; i < len(p.rs); {
		if r := p.rs[i]; p.win.closed(r.missingSeq()) {
			u.drop(r)
			continue
		}
		i++
	}
}

// dropAll drops every batch p has in progress (its session ends).
func (u *UDPServer) dropAll(p *udpPeer) {
	for len(p.rs) > 0 {
		u.drop(p.rs[0])
	}
}

// drop gives up an incomplete batch, counting it.
func (u *UDPServer) drop(r *reassembly) {
	r.peer.incomplete++
	u.unlink(r)
	u.release(r)
}

// unlink takes r off its session's batches in progress and the
// server's list, and out of the budget.
func (u *UDPServer) unlink(r *reassembly) {
	p := r.peer
	if i := slices.Index(p.rs, r); i >= 0 {
		p.rs = slices.Delete(p.rs, i, i+1)
	}
	if r.prev != nil {
		r.prev.next = r.next
	} else {
		u.rsHead = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	} else {
		u.rsTail = r.prev
	}
	r.prev, r.next = nil, nil
	u.rsBytes -= int64(r.total)
	u.Counters.ReassemblyBytes.Store(u.rsBytes)
}

// release keeps an unlinked r's buffers for reuse, if small enough and
// not too many are kept already.
func (u *UDPServer) release(r *reassembly) {
	r.peer = nil
	if len(u.rsFree) < reassemblyKeep && cap(r.buf) <= reassemblyKeepCap {
		u.rsFree = append(u.rsFree, r)
	}
}
