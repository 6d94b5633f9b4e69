package agent

import (
	"sync"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// batch is one sealed batch frame, kept until the collector acknowledges it.
type batch struct {
	buf     []byte // the whole frame; owned by the queue once pushed
	seq     uint64
	packets uint64
	nIfaces int // interfaces that must be declared before it is sent
}

// queue holds sealed, unacknowledged batches in sequence order, bounded
// in bytes. Sequence numbers are assigned on push and are contiguous, so
// the batch with sequence s sits at items[s-items[0].seq]. Safe for
// concurrent use.
type queue struct {
	mu    sync.Mutex
	space *sync.Cond // signalled when bytes are freed or the queue closes
	items []*batch
	bytes int64
	limit int64

	lastSeq uint64 // last sequence assigned
	acked   uint64 // highest sequence acknowledged
	closed  bool

	queuedPackets, ackedPackets, droppedPackets uint64

	pushed chan struct{} // cap 1: a batch was pushed
	freed  chan struct{} // cap 1: batches were acknowledged
	pool   sync.Pool     // *batch with an empty buf of the batch capacity
	bufCap int
}

func newQueue(limit int64, bufCap int) *queue {
	q := &queue{limit: limit, bufCap: bufCap, pushed: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
	q.space = sync.NewCond(&q.mu)
	q.pool.New = func() any { return &batch{buf: make([]byte, 0, bufCap)} }
	return q
}

// get returns an empty batch buffer from the pool.
func (q *queue) get() *batch { return q.pool.Get().(*batch) }

// push seals the batch in enc (which must be building into b.buf) with
// the next sequence number and queues it. When the queue is full, push
// drops the batch (counting its packets) and returns false, unless block
// is set: then it waits for room. A batch larger than the whole limit is
// accepted into an empty queue, so nothing is stuck forever.
func (q *queue) push(b *batch, enc *wire.BatchEncoder, packets, nIfaces int, block bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	need := int64(enc.Len())
	for !q.closed && len(q.items) > 0 && q.bytes+need > q.limit {
		if !block {
			q.droppedPackets += uint64(packets)
			return false
		}
		q.space.Wait()
	}
	if q.closed {
		q.droppedPackets += uint64(packets)
		return false
	}
	q.lastSeq++
	b.seq = q.lastSeq
	b.buf = enc.Finish(b.seq)
	b.packets = uint64(packets)
	b.nIfaces = nIfaces
	q.items = append(q.items, b)
	q.bytes += need
	q.queuedPackets += uint64(packets)
	signal(q.pushed)
	return true
}

// at returns the queued batch with sequence seq, or nil if it is not
// (yet, or any longer) queued.
func (q *queue) at(seq uint64) *batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 || seq < q.items[0].seq || seq > q.lastSeq {
		return nil
	}
	return q.items[seq-q.items[0].seq]
}

// ack releases every batch with sequence <= seq. The caller guarantees
// that none of them is still being written to a connection.
func (q *queue) ack(seq uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if seq <= q.acked {
		return
	}
	q.acked = min(seq, q.lastSeq)
	n := 0
	for n < len(q.items) && q.items[n].seq <= q.acked {
		b := q.items[n]
		q.bytes -= int64(len(b.buf))
		q.ackedPackets += b.packets
		b.buf = b.buf[:0]
		q.pool.Put(b)
		q.items[n] = nil
		n++
	}
	if n > 0 {
		q.items = append(q.items[:0], q.items[n:]...)
		q.space.Broadcast()
		signal(q.freed)
	}
}

// close wakes blocked pushers; later pushes drop.
func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.space.Broadcast()
	q.mu.Unlock()
}

type queueStats struct {
	acked, lastSeq                       uint64
	pending                              int
	queuedPackets, ackedPackets, dropped uint64
}

func (q *queue) stats() queueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queueStats{acked: q.acked, lastSeq: q.lastSeq, pending: len(q.items),
		queuedPackets: q.queuedPackets, ackedPackets: q.ackedPackets, dropped: q.droppedPackets}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
