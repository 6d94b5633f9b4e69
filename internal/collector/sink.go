package collector

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/store"
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
	// the session's Hello frame listing every interface declared so far,
	// and info, the Info frame of the agent (its version) or nil when
	// it sent none. It may block while the sink's buffers are full
	// (backpressure). The slices become the sink's until done is
	// called: the caller
	// does not change them before (send builds each frame for it; a
	// session's hello and info are replaced, never changed in place), and reuses
	// the frame's buffer once done returns, so the sink keeps no
	// reference to it past done. done is called exactly once,
	// from any goroutine, when the frame is durable (nil) or cannot be
	// made so; the calls for one agent come in the order of Send.
	Send(agent string, hello, info, frame []byte, done func(error))
	// MaxFrame returns the largest frame (header included) the sink
	// takes together with hello; 0: no limit of its own.
	MaxFrame(agent string, hello []byte) uint32
}

// sinkDest hands what the sessions receive to a Sink: no files, no
// marks, no background work.
type sinkDest struct{ sink Sink }

func (sinkDest) store() *store.Store         { return nil }
func (sinkDest) dir() string                 { return "" }
func (sinkDest) counters() *store.Counters   { return new(store.Counters) }
func (sinkDest) run(ctx context.Context)     { <-ctx.Done() }
func (sinkDest) close(context.Context) error { return nil }
func (*sinkAppender) end(*session, bool)     {}
func (*sinkAppender) fill(*AgentStats)       {}

// info keeps the agent's Info frame for the records sent after it.
func (ss *sinkAppender) info(in *wire.Info) {
	if *in != (wire.Info{}) {
		ss.infoFrame = wire.AppendInfo(nil, in)
	}
}
func (ss *sinkAppender) durable() uint64 { return ss.acked.Load() }

// sinkAppender is a session's state in an ingest collector.
type sinkAppender struct {
	sink      Sink
	name      string
	hello     []byte // the Hello frame with every interface so far
	infoFrame []byte // the agent's Info frame (info), nil before one

	mu      sync.Mutex
	pending []sent // sent, not yet durable, in order
	err     error  // the first failure; nothing is acknowledged after it

	acked atomic.Uint64 // highest batch sequence durable with all before it
	s     *session      // for onAck, kick and count (from the sink's goroutine)
}

type sent struct {
	seq     uint64 // 0: a Stats frame
	done    bool
	packets uint64 // of a batch, counted once durable
	bytes   uint64
}

// open is begin for an ingest collector: the frames are bounded so
// that one fits a record of the sink.
func (d sinkDest) open(s *session) (appender, error) {
	h := &s.hello
	ss := &sinkAppender{sink: d.sink, name: h.Name, hello: wire.AppendRecordHello(nil, h, h.Interfaces), s: s}
	if m := ss.sink.MaxFrame(h.Name, ss.hello); m != 0 {
		if m <= wire.HeaderSize+64<<10 {
			s.core.Counters.Rejected.Add(1)
			return nil, fmt.Errorf("%w: the sink takes frames of at most %d bytes with this hello: too small for a batch", ErrRejected, m)
		}
		s.maxPayload = min(s.maxPayload, m-wire.HeaderSize)
	}
	return ss, nil
}

// start keeps the agent's numbering of its interfaces. The Welcome says
// nothing was received (LastSeq 0: the agent resends all it has not
// seen acknowledged; the writers drop what is already in a file). The
// older connection's frames in flight still complete; the writers drop
// whatever arrives twice.
func (ss *sinkAppender) start(s *session) (uint64, bool, error) {
	s.ifmap = make([]int, len(s.hello.Interfaces))
	for i := range s.ifmap {
		s.ifmap[i] = i
	}
	return 0, false, nil
}

// send hands one frame (type t, its flags and payload) to the sink;
// a batch's (seq not 0) packets and bytes are counted once it and every
// frame before it are durable.
func (ss *sinkAppender) send(t wire.Type, flags uint8, payload []byte, seq, packets, bytes uint64) error {
	ss.mu.Lock()
	if err := ss.err; err != nil {
		ss.mu.Unlock()
		return err
	}
	ss.pending = append(ss.pending, sent{seq: seq, packets: packets, bytes: bytes})
	ss.mu.Unlock()
	// One frame as the agent sent it: a header rebuilt from its fields
	// (the same bytes) and the payload, in a pooled buffer that is the
	// sink's until it answers (a fresh buffer per batch costs a page
	// fault per 4 KiB of it).
	bp := wire.Buffer(wire.HeaderSize + len(payload))
	frame := wire.AppendHeader((*bp)[:0], t, flags, uint32(len(payload)))
	frame = append(frame, payload...)
	ss.sink.Send(ss.name, ss.hello, ss.infoFrame, frame, func(err error) {
		ss.complete(seq, err)
		wire.PutBuffer(bp)
	})
	return nil
}

// complete records that the frame of sequence seq (0: Stats) is
// durable, or failed; the sink reports in order of send.
func (ss *sinkAppender) complete(seq uint64, err error) {
	ss.mu.Lock()
	if err != nil && ss.err == nil {
		ss.err = fmt.Errorf("%w: %w", ErrSink, err)
		ss.mu.Unlock()
		ss.s.log.Error("sink failed: nothing more acknowledged, connection dropped; the agent will resend", "err", ss.err)
		ss.s.kick()
		return
	}
	i := slices.IndexFunc(ss.pending, func(p sent) bool { return p.seq == seq && !p.done })
	if i >= 0 {
		ss.pending[i].done = true
	}
	var top uint64
	n := 0
	for n < len(ss.pending) && ss.pending[n].done {
		p := &ss.pending[n]
		top = max(top, p.seq)
		if p.seq != 0 {
			ss.s.count(1, p.packets, p.bytes)
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
	if f := ss.s.onAck; f != nil {
		f(top)
	}
}

// commit returns the highest sequence to acknowledge, and the sink's
// failure if there was one.
func (ss *sinkAppender) commit(*session) (uint64, error) {
	ss.mu.Lock()
	err := ss.err
	ss.mu.Unlock()
	return ss.acked.Load(), err
}

// append checks a batch without decompressing it and sends it as it
// came. A batch sent raw is validated record by record (reading its
// metadata is all that costs); a compressed one is checked as far as
// its frame allows (its checksum where it has one, verified by the
// session's ParseBatch, its codec, a decompressed length within
// MaxFrame and able to hold its records), not decompressed: the writer
// that takes its record from Kafka decompresses it once, validates it
// there as it must for any record (docs/security.md) and writes it.
// Its bytes are counted as declared (RawLen).
func (ss *sinkAppender) append(s *session, b wire.Batch, flags uint8, payload []byte) error {
	if uint32(len(payload)) > s.maxPayload {
		return fmt.Errorf("batch seq %d: %d bytes, over the %d this collector's sink takes: %w", b.Seq, len(payload), s.maxPayload, wire.ErrTooLarge)
	}
	c := s.core
	switch {
	case b.Codec == wire.CodecNone:
		if err := b.Validate(uint32(len(s.ifmap))); err != nil {
			return err
		}
	case b.RawLen > c.cfg.MaxFrame:
		c.Counters.TooLargeRaw.Add(1)
		return fmt.Errorf("batch seq %d: declares %d bytes decompressed, over %d: %w", b.Seq, b.RawLen, c.cfg.MaxFrame, compress.ErrTooLarge)
	default:
		c.Counters.WireBytes.Add(uint64(len(b.Records)))
		c.Counters.RawBytes.Add(uint64(b.RawLen))
	}
	return ss.send(wire.TypeBatch, flags, payload, b.Seq, uint64(b.Count), uint64(b.RawLen))
}

// addIface sends the next frames with a hello that declares ifc too; a
// record keeps the agent's numbering.
func (ss *sinkAppender) addIface(s *session, ifc wire.Interface) (int, error) {
	ss.hello = wire.AppendRecordHello(nil, &s.hello, append(slices.Clip(s.ifaces), ifc))
	return len(s.ifmap), nil
}

// stats sends a Stats frame after checking its interface indexes.
func (ss *sinkAppender) stats(s *session, payload []byte) error {
	for _, is := range s.stats.Interfaces {
		if int(is.Index) >= len(s.ifmap) {
			return fmt.Errorf("stats: interface %d not declared: %w", is.Index, wire.ErrMalformed)
		}
	}
	return ss.send(wire.TypeStats, 0, payload, 0, 0, 0)
}
