package agent

import (
	"cmp"
	"slices"
	"sync"

	"github.com/pcapsync/pcapsync/internal/observe"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// batch is one sealed batch frame, kept until the collector acknowledges it.
type batch struct {
	buf     []byte // the whole frame, owned by the queue once pushed; nil if only spooled
	seq     uint64
	packets uint64
	nIfaces int // interfaces that must be declared before it is sent
	// recovered: loaded from a previous run's spool (queue.recover)
	recovered bool
	mem       int // bytes it counts against the queue's limit while in memory
	frame     int // bytes of its frame, whether in memory or only spooled

	// sentAt is when it was first written to a connection (Agent.clock
	// nanoseconds), 0 before; read by ack for the latency histogram.
	sentAt int64

	seg  *segment // where the spool holds it, if it does
	off  int64
	size int
}

// queue holds sealed, unacknowledged batches in sequence order, bounded
// in bytes. Sequence numbers are assigned on push and are contiguous
// unless span is set, so the batch with sequence s sits at
// items[s-items[0].seq] (at); with span, batches are found by next.
// Safe for concurrent use.
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
	sealedPackets                               uint64 // queued by push: this run's, not recovered from the spool
	// recoveredPackets: of the batches recovered from the spool
	// (recover), not in queuedPackets; recoveredAcked of those acked.
	recoveredPackets, recoveredAcked uint64
	ackedBatches                     uint64
	frameBytes                       int64 // frames of the queued batches (memory and spool)

	// ackLatency, if set, observes per acknowledged batch the seconds
	// from its first write (batch.sentAt) to its acknowledgement, with
	// clock the same clock as sentAt. Called with mu held.
	ackLatency observe.Observer
	clock      func() int64

	pushed chan struct{} // cap 1: a batch was pushed
	freed  chan struct{} // cap 1: batches were acknowledged
	pool   sync.Pool     // *batch with an empty buf of the batch capacity
	bufCap int

	// writing is the batch the sender is writing to a connection. The
	// collector can acknowledge it before the write returns (its last
	// byte is in the kernel); ack then leaves it out of the pool
	// (released) and endWrite pools it, so no source refills a buffer a
	// write may still read.
	writing  *batch
	released bool
	// minCharge, if set, is what a batch in memory counts at least:
	// its buffer's capacity, where batches are much shorter than that
	// (UDP: a datagram each), so that the limit bounds real memory.
	minCharge int

	// ahead, if set, also bounds the bytes of the batches queued after
	// sentMax, the highest sequence the sender began to write: a
	// blocking push waits for the sender too (see replayAhead).
	ahead   int64
	sentMax uint64

	// spool, if set, bounds the queue instead of limit: every batch is
	// written to it, and limit only bounds the batches also kept in memory.
	spool *spool

	// span, if set, returns how many sequence numbers a batch frame of
	// the given length takes (UDP: one per datagram it travels in); the
	// next batch's number follows them. Without it every batch takes one.
	// Not with a spool.
	span func(frame int) uint64
}

// replayAhead is how far a replay (Config.ReadFile) over TCP without a
// spool reads ahead of the sender: the bytes of the queued batches not
// yet sent. A replay waits when the queue is full instead of dropping,
// so without this bound its reader ran up to Config.QueueBytes (64 MiB by
// default) ahead of the collector, in fresh memory that the kernel must
// fault in and clear, for no speed: the sender writes one batch at a
// time. The unacknowledged window (sent, not yet acknowledged) is still
// bounded by Config.QueueBytes alone, so a replay over a long fat
// network keeps its window.
const replayAhead = 8 << 20

// replayAheadLimit is the queue's read-ahead bound (see replayAhead; at
// least four batch buffers of bufCap bytes), or 0 (none) for live
// capture, UDP, Kafka and a spool.
func (a *Agent) replayAheadLimit(bufCap int) int64 {
	c := &a.cfg
	if _, tcp := a.tr.(*tcpSender); !tcp || c.ReadFile == "" || c.Spool != "" {
		return 0
	}
	return max(replayAhead, 4*int64(bufCap))
}

func newQueue(limit int64, bufCap int) *queue {
	q := &queue{limit: limit, bufCap: bufCap, pushed: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
	q.space = sync.NewCond(&q.mu)
	q.pool.New = func() any { return &batch{buf: make([]byte, 0, bufCap)} }
	return q
}

// get returns an empty batch buffer from the pool.
func (q *queue) get() *batch { return q.pool.Get().(*batch) }

// put returns an unqueued batch buffer to the pool.
func (q *queue) put(b *batch) {
	b.buf, b.seg = b.buf[:0], nil
	q.pool.Put(b)
}

// push seals the batch in enc with the next sequence number and queues
// it. With CodecNone enc must be building into b.buf; with another codec
// b.buf holds the frame with enc's records compressed (see
// wire.CompressedFrame). When the queue is full (the
// spool, if there is one, else memory), push drops the batch (counting
// its packets) and returns false, unless block is set: then it waits for
// room. A batch larger than the whole limit is accepted into an empty
// queue, so nothing is stuck forever.
func (q *queue) push(b *batch, enc *wire.BatchEncoder, codec wire.Codec, packets, nIfaces int, block bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	need := max(enc.Len(), q.minCharge)
	if codec != wire.CodecNone {
		need = max(len(b.buf), q.minCharge)
	}
	for !q.closed && len(q.items) > 0 && (q.isFull(need) || block && q.aheadFull(need)) {
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
	b.seq = q.lastSeq + 1
	if codec == wire.CodecNone {
		b.buf = enc.Finish(b.seq)
	} else {
		b.buf = enc.FinishCompressed(b.buf, b.seq, codec)
	}
	b.packets = uint64(packets)
	b.nIfaces = nIfaces
	b.frame, b.sentAt = len(b.buf), 0
	if q.spool != nil {
		if err := q.spool.append(b, b.buf); err != nil {
			q.spool.log.Error("batch dropped", "err", err)
			q.droppedPackets += uint64(packets)
			return false
		}
		if q.bytes+int64(need) > q.limit {
			// Memory is full: keep the batch on disk only.
			meta := &batch{seq: b.seq, packets: b.packets, nIfaces: nIfaces, seg: b.seg, off: b.off, size: b.size, frame: b.frame}
			q.put(b)
			b = meta
		}
	}
	q.lastSeq = b.seq
	if q.span != nil {
		q.lastSeq += q.span(b.frame) - 1
	}
	q.items = append(q.items, b)
	if b.buf != nil {
		b.mem = need
		q.bytes += int64(need)
	}
	q.queuedPackets += uint64(packets)
	q.sealedPackets += uint64(packets)
	q.frameBytes += int64(b.frame)
	signal(q.pushed)
	return true
}

func (q *queue) isFull(need int) bool {
	if q.spool != nil {
		return q.spool.full(need)
	}
	return q.bytes+int64(need) > q.limit
}

// aheadFull says whether need more bytes would take the batches not
// yet sent past q.ahead (never, without it). Batches are contiguous in
// sequence here (no span: TCP).
func (q *queue) aheadFull(need int) bool {
	if q.ahead == 0 || len(q.items) == 0 {
		return false
	}
	unsent := int64(need)
	for _, b := range q.items[min(len(q.items), int(max(q.sentMax+1, q.items[0].seq)-q.items[0].seq)):] {
		unsent += int64(b.mem)
	}
	return unsent > q.ahead
}

// recover queues batches a previous run left in the spool.
func (q *queue) recover(bs []*batch, nIfaces int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, b := range bs {
		b.nIfaces = nIfaces
		q.items = append(q.items, b)
		q.lastSeq = b.seq
		q.recoveredPackets += b.packets
		b.recovered = true
		b.frame = b.size
		q.frameBytes += int64(b.frame)
	}
	if len(bs) > 0 {
		q.acked = bs[0].seq - 1
	}
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

// next returns the first queued batch with a sequence number above
// after, or nil if there is none (yet).
func (q *queue) next(after uint64) *batch {
	q.mu.Lock()
	defer q.mu.Unlock()
	i, _ := slices.BinarySearchFunc(q.items, after+1, func(b *batch, seq uint64) int { return cmp.Compare(b.seq, seq) })
	if i == len(q.items) {
		return nil
	}
	return q.items[i]
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
	var now int64
	if q.ackLatency != nil {
		now = q.clock()
	}
	n := 0
	for n < len(q.items) && q.items[n].seq <= q.acked {
		b := q.items[n]
		if b.recovered {
			q.recoveredAcked += b.packets
		} else {
			q.ackedPackets += b.packets
		}
		q.ackedBatches++
		q.frameBytes -= int64(b.frame)
		if q.ackLatency != nil && b.sentAt != 0 {
			q.ackLatency.Observe(float64(now-b.sentAt) / 1e9)
		}
		if b.buf != nil {
			q.bytes -= int64(b.mem)
			if b == q.writing {
				q.released = true
			} else {
				q.put(b)
			}
		}
		q.items[n] = nil
		n++
	}
	if q.spool != nil {
		q.spool.release(q.acked)
	}
	if n > 0 {
		q.items = append(q.items[:0], q.items[n:]...)
		q.space.Broadcast()
		signal(q.freed)
	}
}

// beginWrite and endWrite bracket the sender's write of b (see writing).
func (q *queue) beginWrite(b *batch) {
	q.mu.Lock()
	q.writing, q.released = b, false
	if b.seq > q.sentMax {
		q.sentMax = b.seq
		if q.ahead > 0 {
			q.space.Broadcast() // a replay's reader may read on
		}
	}
	q.mu.Unlock()
}

func (q *queue) endWrite() {
	q.mu.Lock()
	if q.released {
		q.put(q.writing)
	}
	q.writing, q.released = nil, false
	q.mu.Unlock()
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
	sealedPackets                        uint64
	recoveredPackets, recoveredAcked     uint64
	ackedBatches                         uint64
	frameBytes                           int64
}

func (q *queue) stats() queueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return queueStats{acked: q.acked, lastSeq: q.lastSeq, pending: len(q.items),
		queuedPackets: q.queuedPackets, ackedPackets: q.ackedPackets, dropped: q.droppedPackets,
		sealedPackets: q.sealedPackets, ackedBatches: q.ackedBatches, frameBytes: q.frameBytes,
		recoveredPackets: q.recoveredPackets, recoveredAcked: q.recoveredAcked}
}

// markSent records the first write of the batch with sequence seq, for
// the acknowledgement latency; a no-op without an observer.
func (q *queue) markSent(seq uint64) {
	if q.ackLatency == nil {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) > 0 && seq >= q.items[0].seq && seq <= q.lastSeq {
		if b := q.items[seq-q.items[0].seq]; b.sentAt == 0 {
			b.sentAt = q.clock()
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
