package collector

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// A Sink takes the frames of an ingest collector (Config.Sink) in place
// of a store: the Kafka producer. The collector then keeps nothing on
// disk: it checks every frame as it would before writing it, hands it
// over unchanged, and acknowledges a batch to its agent once the sink
// reports it durable (and every batch before it).
type Sink interface {
	// Send hands over one Batch or Stats frame of agent's session,
	// header and payload exactly as the agent sent them, with hello,
	// the session's Hello frame listing every interface declared so far.
	// It may block while the sink's buffers are full (backpressure).
	// Both slices become the sink's until done is called: the caller
	// does not change them before (send builds each frame for it; a
	// session's hello is replaced, never changed in place), and reuses
	// the frame's buffer once done returns, so the sink keeps no
	// reference to it past done. done is called exactly once,
	// from any goroutine, when the frame is durable (nil) or cannot be
	// made so; the calls for one agent come in the order of Send.
	Send(agent string, hello, frame []byte, done func(error))
	// MaxFrame returns the largest frame (header included) the sink
	// takes together with hello; 0: no limit of its own.
	MaxFrame(agent string, hello []byte) uint32
}

// sinkSession is a session's state in an ingest collector.
type sinkSession struct {
	sink  Sink
	name  string
	hello []byte // the Hello frame with every interface so far

	mu      sync.Mutex
	pending []sent // sent, not yet durable, in order
	err     error  // the first failure; nothing is acknowledged after it

	acked atomic.Uint64 // highest batch sequence durable with all before it
	onAck func(uint64)  // called (from the sink's goroutine) when acked rises; set before the first frame
	fail  func(error)   // ends the session (its transport) after a failure
}

type sent struct {
	seq     uint64 // 0: a Stats frame
	done    bool
	durable func() // counts the batch once durable; nil for Stats
}

// send hands one frame (type t, its flags and payload) to the sink;
// durable (if not nil) is called once it and every frame before it are
// durable.
func (ss *sinkSession) send(t wire.Type, flags uint8, payload []byte, seq uint64, durable func()) error {
	ss.mu.Lock()
	if err := ss.err; err != nil {
		ss.mu.Unlock()
		return err
	}
	ss.pending = append(ss.pending, sent{seq: seq, durable: durable})
	ss.mu.Unlock()
	// One frame as the agent sent it: a header rebuilt from its fields
	// (the same bytes) and the payload, in a pooled buffer that is the
	// sink's until it answers (a fresh buffer per batch costs a page
	// fault per 4 KiB of it).
	bp := wire.Buffer(wire.HeaderSize + len(payload))
	frame := wire.AppendHeader((*bp)[:0], t, flags, uint32(len(payload)))
	frame = append(frame, payload...)
	ss.sink.Send(ss.name, ss.hello, frame, func(err error) {
		ss.complete(seq, err)
		wire.PutBuffer(bp)
	})
	return nil
}

// complete records that the frame of sequence seq (0: Stats) is
// durable, or failed; the sink reports in order of send.
func (ss *sinkSession) complete(seq uint64, err error) {
	ss.mu.Lock()
	if err != nil && ss.err == nil {
		ss.err = fmt.Errorf("%w: %w", ErrSink, err)
		ss.mu.Unlock()
		ss.fail(ss.err)
		return
	}
	i := slices.IndexFunc(ss.pending, func(p sent) bool { return p.seq == seq && !p.done })
	if i >= 0 {
		ss.pending[i].done = true
	}
	var top uint64
	n := 0
	for n < len(ss.pending) && ss.pending[n].done {
		top = max(top, ss.pending[n].seq)
		if d := ss.pending[n].durable; d != nil {
			d()
		}
		n++
	}
	ss.pending = slices.Delete(ss.pending, 0, n)
	failed := ss.err != nil
	ss.mu.Unlock()
	if failed || top == 0 {
		return
	}
	for {
		cur := ss.acked.Load()
		if top <= cur {
			return
		}
		if ss.acked.CompareAndSwap(cur, top) {
			break
		}
	}
	if ss.onAck != nil {
		ss.onAck(top)
	}
}

// status returns the highest sequence to acknowledge, and the sink's
// failure if there was one.
func (ss *sinkSession) status() (uint64, error) {
	ss.mu.Lock()
	err := ss.err
	ss.mu.Unlock()
	return ss.acked.Load(), err
}

// beginSink is begin for an ingest collector: no files, no marks. The
// Welcome says nothing was received (LastSeq 0: the agent resends all
// it has not seen acknowledged; the writers drop what is already in a
// file) and bounds the frames so that one fits a record of the sink.
func (c *Core) beginSink(s *session) (*session, wire.Welcome, error) {
	h := &s.hello
	s.ifmap = make([]int, len(h.Interfaces))
	for i := range s.ifmap {
		s.ifmap[i] = i
	}
	s.ifaces = slices.Clone(h.Interfaces)
	ss := &sinkSession{sink: c.cfg.Sink, name: h.Name, hello: wire.AppendRecordHello(nil, h, s.ifaces)}
	if m := ss.sink.MaxFrame(h.Name, ss.hello); m != 0 {
		if m <= wire.HeaderSize+64<<10 {
			c.Counters.Rejected.Add(1)
			return nil, wire.Welcome{}, fmt.Errorf("%w: the sink takes frames of at most %d bytes with this hello: too small for a batch", ErrRejected, m)
		}
		s.maxPayload = min(s.maxPayload, m-wire.HeaderSize)
	}
	ss.fail = func(err error) {
		s.log.Error("sink failed: nothing more acknowledged, connection dropped; the agent will resend", "err", err)
		s.kick()
	}
	s.sink = ss

	ag := c.agentNamed(h.Name, nil)
	ag.handover.Lock()
	defer ag.handover.Unlock()
	// The older connection's frames in flight still complete; the
	// writers drop whatever arrives twice.
	if err := c.replace(ag, s); err != nil {
		return nil, wire.Welcome{}, err
	}
	c.activate(ag, s)
	return s, wire.Welcome{LastSeq: 0, MaxFrame: s.maxPayload, Codecs: acceptedCodecs}, nil
}

// sinkBatch checks a batch as write would (a compressed one is
// decompressed to check its records, then dropped: the sink takes the
// frame as it came) and sends it.
func (s *session) sinkBatch(b *wire.Batch, flags uint8, payload []byte) error {
	if uint32(len(payload)) > s.maxPayload {
		return fmt.Errorf("batch seq %d: %d bytes, over the %d this collector's sink takes: %w", b.Seq, len(payload), s.maxPayload, wire.ErrTooLarge)
	}
	c, ag := s.core, s.ag
	if b.Codec != wire.CodecNone {
		c.Counters.Compressed.Add(1)
	}
	if b.Unchecked {
		c.Counters.Unchecked.Add(1)
	}
	ag.lastRecv.Store(b.Seq)
	ag.lastBatch.Store(time.Now().UnixNano())
	chk := *b
	if chk.Codec != wire.CodecNone {
		buf, err := c.decompress(&chk)
		if err != nil {
			return err
		}
		defer c.bufs.Put(buf)
	}
	if err := chk.Validate(uint32(len(s.ifmap))); err != nil {
		return err
	}
	if seq := s.sink.acked.Load(); b.Seq <= seq {
		c.Counters.Duplicates.Add(1) // a resend within this session: already durable
		ag.duplicates.Add(1)
		return nil
	}
	packets, bytes := uint64(b.Count), uint64(len(chk.Records))
	return s.sink.send(wire.TypeBatch, flags, payload, b.Seq, func() {
		c.Counters.Batches.Add(1)
		c.Counters.Packets.Add(packets)
		c.Counters.Bytes.Add(bytes)
		ag.batches.Add(1)
		ag.packets.Add(packets)
		ag.bytes.Add(bytes)
	})
}

// sinkStats sends a Stats frame (already parsed into s.stats) after
// checking its interface indexes.
func (s *session) sinkStats(payload []byte) error {
	for _, is := range s.stats.Interfaces {
		if int(is.Index) >= len(s.ifmap) {
			return fmt.Errorf("stats: interface %d not declared: %w", is.Index, wire.ErrMalformed)
		}
	}
	return s.sink.send(wire.TypeStats, 0, payload, 0, nil)
}
