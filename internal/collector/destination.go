package collector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// A destination is where a Core puts what its sessions receive, chosen
// once in NewCore: the files of a store.Store (storeDest) or a Sink,
// an ingest collector's Kafka producer (sinkDest). The sessions parse,
// deduplicate and count, and append to their appender without knowing
// which destination it is, as Prometheus's scraper appends to a
// storage.Appendable without knowing the local TSDB from remote write.
type destination interface {
	// open returns the appender of session s (its hello, peer, kick
	// and log set), before the agent's previous session is ended: it
	// must not touch what that session writes. Errors wrap ErrRejected
	// (counted in Counters.Rejected) or ErrBusy.
	open(s *session) (appender, error)
	// run does the destination's background work (rotation by time,
	// idle close, syncs) until ctx ends.
	run(ctx context.Context)
	// close ends it once every session ended and run returned.
	close(ctx context.Context) error
	// store returns the store written to; nil for a sink.
	store() *store.Store
	// dir returns the absolute output root; "" for a sink.
	dir() string
	// counters returns the files' counters (a sink's stay zero).
	counters() *store.Counters
}

// An appender is one session's way into its destination. The session
// calls it from its own goroutine, start first and end last.
type appender interface {
	// start makes the agent's files (or records) the session's, once
	// its previous session ended: it declares the hello's interfaces,
	// filling s.ifmap, and returns the Welcome's LastSeq, the sequence
	// up to which every batch is durable, and whether that is the
	// agent's mark (false: unknown, 0, the agent resends all it has not
	// seen acknowledged). Errors wrap ErrRejected.
	start(s *session) (last uint64, known bool, err error)
	// durable returns the highest sequence durable with every batch of
	// the session before it: what a commit acknowledges, and at or
	// below which a batch is a duplicate.
	durable() uint64
	// append takes batch b (a copy the appender may change), parsed from a Batch frame's flags and
	// payload and not a duplicate; it becomes durable at the next
	// commit (a store) or once the sink says so. An error is the
	// batch's (nothing of it taken) or wraps ErrStorage or ErrSink.
	append(s *session, b wire.Batch, flags uint8, payload []byte) error
	// addIface declares one more interface (s.ifaces not yet grown)
	// and returns its index in the files.
	addIface(s *session, ifc wire.Interface) (int, error)
	// stats takes a Stats frame's payload, parsed into s.stats.
	stats(s *session, payload []byte) error
	// info takes the agent's Info (its version), which the session
	// keeps for AgentStats itself: what the destination passes on.
	info(in *wire.Info)
	// commit makes what was appended durable (a store) or reports what
	// became so (a sink), and returns durable's sequence.
	commit(s *session) (uint64, error)
	// end ends the session: clean (a goodbye) closes the agent's file.
	end(s *session, clean bool)
	// fill adds what the destination knows of the agent (its files) to
	// st, for AgentStats. Safe for concurrent use.
	fill(st *AgentStats)
}

// storeDest writes into the files of a store.
type storeDest struct{ st *store.Store }

// storeAppender is a session's store.Writer (one per agent name, used
// by one session at a time) and the agent instance's marks.
type storeAppender struct {
	w    *store.Writer
	inst *store.Instance
}

func (d storeDest) store() *store.Store             { return d.st }
func (d storeDest) dir() string                     { return d.st.Dir() }
func (d storeDest) counters() *store.Counters       { return &d.st.Counters }
func (d storeDest) run(ctx context.Context)         { d.st.Run(ctx) }
func (d storeDest) close(ctx context.Context) error { return d.st.Close(ctx) }
func (a *storeAppender) durable() uint64            { return a.inst.LastSeq() }
func (a *storeAppender) addIface(_ *session, ifc wire.Interface) (int, error) {
	return a.w.AddInterface(ifc)
}

func (d storeDest) open(s *session) (appender, error) {
	c, name := s.core, s.hello.Name
	w, err := d.st.Writer(name)
	if errors.Is(err, store.ErrAgentDir) {
		// Its directory is a link (or not a directory): the agent is
		// refused, with the details in the collector's log only, until
		// an operator puts it right; nothing of it is acknowledged.
		c.Counters.Rejected.Add(1)
		return nil, fmt.Errorf("%w: %w: the collector's directory of agent %q is a link or not a directory", ErrRejected, store.ErrAgentDir, name)
	}
	if err != nil {
		// The store cannot take the agent now: its files are being
		// repaired, another process holds it (a shared root), or its
		// lock or marks could not be read. Nothing is wrong with the
		// hello: the agent (or a writer's record) comes back later.
		return nil, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	a := &storeAppender{w: w, inst: d.st.Instance(s.hello.Instance, name)}
	if a.inst.Name() != name {
		c.Counters.Rejected.Add(1)
		return nil, fmt.Errorf("%w: instance id already belongs to agent %q", ErrRejected, a.inst.Name())
	}
	return a, nil
}

func (a *storeAppender) start(s *session) (uint64, bool, error) {
	h := &s.hello
	a.w.Start(h.Host)
	s.ifmap = make([]int, len(h.Interfaces))
	for i, ifc := range h.Interfaces {
		var err error
		if s.ifmap[i], err = a.w.AddInterface(ifc); err != nil {
			return 0, false, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	return a.inst.LastSeq(), true, nil
}

// append decompresses b (if it is), validates every record and writes
// them into the agent's file, then hands the batch to the Feed.
func (a *storeAppender) append(s *session, b wire.Batch, _ uint8, _ []byte) (err error) {
	c := s.core
	if obs := c.cfg.BatchWriteLatency; obs != nil {
		now := time.Now()
		defer func() {
			if err == nil {
				obs.Observe(time.Since(now).Seconds())
			}
		}()
	}
	if b.Codec != wire.CodecNone {
		buf, err := c.decompress(&b)
		if err != nil {
			return err
		}
		defer c.bufs.Put(buf)
	}
	// Checked whole before any of it is written, and decoded once for
	// both: kept decoded where that takes no more memory than the
	// records' bytes (each record's decoded form is 40 bytes; a batch of
	// tiny records is checked, then decoded again as it is written).
	var bytes uint64
	if n := int(b.Count); n*int(unsafe.Sizeof(wire.Record{})) <= len(b.Records) {
		rp := recordsPool.Get().(*[]wire.Record)
		recs, err := b.Decode(uint32(len(s.ifmap)), slices.Grow((*rp)[:0], n))
		defer func() {
			clear(recs[:cap(recs)]) // holds no frame's memory while pooled
			*rp = recs[:0]
			recordsPool.Put(rp)
		}()
		if err != nil {
			return err
		}
		if bytes, err = a.w.WriteDecoded(&b, recs, s.ifmap, a.inst); err != nil {
			return s.storageFailed(err)
		}
	} else {
		if err := b.Validate(uint32(len(s.ifmap))); err != nil {
			return err
		}
		if bytes, err = a.w.WriteBatch(&b, s.ifmap, a.inst); err != nil {
			return s.storageFailed(err)
		}
	}
	s.uncommitted.batches++
	s.uncommitted.packets += uint64(b.Count)
	s.uncommitted.bytes += bytes
	s.uncommittedRaw += len(b.Records)
	if f := c.cfg.Feed; f != nil {
		s.feedEv.Agent, s.feedEv.Host = s.hello.Name, s.hello.Host
		s.feedB = b
		s.feedEv.Ifaces, s.feedEv.Batch = s.ifaces, &s.feedB
		f.Batch(&s.feedEv)
		s.feedB = wire.Batch{}
	}
	return nil
}

// recordsPool holds the decoded records of the batches being written:
// one slice for each batch a session is writing at once.
var recordsPool = sync.Pool{New: func() any { return new([]wire.Record) }}

// info: the store keeps no Info (the session shows the version).
func (a *storeAppender) info(*wire.Info) {}

func (a *storeAppender) stats(s *session, _ []byte) error {
	grew, err := a.w.RecordStats(&s.stats, s.ifmap)
	if err != nil {
		return err
	}
	if grew {
		s.log.Warn("agent reports drops", "agent_queue_drops", s.stats.AgentDrops, "interfaces", fmt.Sprint(s.stats.Interfaces))
	}
	return nil
}

func (a *storeAppender) commit(s *session) (uint64, error) {
	s.uncommittedRaw = 0
	if err := a.w.Commit(); err != nil {
		return a.inst.LastSeq(), s.storageFailed(err)
	}
	u := &s.uncommitted
	s.count(u.batches, u.packets, u.bytes)
	u.batches, u.packets, u.bytes = 0, 0, 0
	return a.inst.LastSeq(), nil
}

// end closes the agent's file after a goodbye; after a lost connection
// it stays open for IdleClose so that a reconnect continues it; after a
// takeover the new session owns it.
func (a *storeAppender) end(s *session, clean bool) {
	switch {
	case s.kicked.Load():
	case clean:
		if err := a.w.Close(); err != nil {
			s.log.Error("closing file", "err", err)
		}
	default:
		a.w.Linger()
	}
}

func (a *storeAppender) fill(st *AgentStats) {
	ws := a.w.Stats()
	st.DiskBytes, st.AgentDrops, st.Captured, st.KernelDrops, st.ReportTime = ws.DiskBytes, ws.AgentDrops, ws.Captured, ws.KernelDrops, ws.ReportTime
	st.Interfaces = ws.Interfaces
}

// storageFailed handles a failed write or commit (disk full, I/O error;
// the store cut the file back to its last commit and closed it, still
// readable, or a failed rotation had): nothing written since the last
// commit is acknowledged. The error wraps ErrStorage.
func (s *session) storageFailed(err error) error {
	s.pending = s.app.durable()
	s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
	s.uncommittedRaw = 0
	return fmt.Errorf("%w: %w", ErrStorage, err)
}
