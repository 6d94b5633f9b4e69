package collector

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Counters are the collector's totals since start. Safe for concurrent use.
type Counters struct {
	Sessions       atomic.Uint64 // handshakes accepted
	Rejected       atomic.Uint64 // handshakes refused: TLS, token, identity, hello
	ProtocolErrors atomic.Uint64 // connections closed for a malformed or unexpected frame
	Batches        atomic.Uint64 // batches written
	Packets        atomic.Uint64 // packets written
	Bytes          atomic.Uint64 // captured bytes written
	Duplicates     atomic.Uint64 // batches received again and dropped
	MissingBatches atomic.Uint64 // batches an in-order (TCP) session's sequence skipped: lost for good
	PeerTimeouts   atomic.Uint64 // sessions ended because the agent sent nothing for the peer timeout
	OverLimit      atomic.Uint64 // connections closed at once because MaxConns were open

	Compressed  atomic.Uint64 // compressed batches received (duplicates included)
	Unchecked   atomic.Uint64 // batches received without a checksum (duplicates included): agents inside TLS
	WireBytes   atomic.Uint64 // their records sections as received
	RawBytes    atomic.Uint64 // and decompressed
	BadCompress atomic.Uint64 // batches refused: compressed bytes corrupt
	TooLargeRaw atomic.Uint64 // batches refused: would decompress past MaxFrame (bombs)
	TooLarge    atomic.Uint64 // connections closed for a frame over a limit (MaxFrame, records per batch); also in ProtocolErrors
}

// Core is the transport-independent collector: it turns sessions of
// batches into files, through a store.Store. Safe for concurrent use.
type Core struct {
	cfg Config
	log *slog.Logger
	st  *store.Store

	// Counters may be read at any time; the files' own counters are
	// Store().Counters.
	Counters Counters

	mu     sync.Mutex // guards agents, agent.active, agent.last
	agents map[string]*agent

	dec  *compress.Decoder // shared by all sessions
	bufs sync.Pool         // *[]byte: decompressed records, returned after each batch
	mem  *wire.Memory      // ReadMemory: the TCP connections' frame buffers
}

// agent is one agent name: its files (a store.Writer, used by one
// session at a time: handover), its sessions and its totals.
type agent struct {
	name     string
	handover sync.Mutex // serialises begin for this name
	// w is the store's Writer of the name, set by begin under Core.mu
	// (a new one after store.Store.Release), used by the active session.
	w *store.Writer

	active *session // guarded by Core.mu
	last   *session // the latest session, ended or not; guarded by Core.mu

	// Totals over every session of this name, for AgentStats.
	batches, packets, bytes atomic.Uint64 // committed
	duplicates, missing     atomic.Uint64 // batches, as in Counters
	lastRecv                atomic.Uint64 // sequence of the last batch received
	lastBatch               atomic.Int64  // when it was received, Unix ns
}

// NewCore returns a Core writing below cfg.Store.Dir (see store.Open:
// it refuses a root it cannot write to, or on a disk already full).
// Files a previous run left unfinished are repaired in the background;
// until an agent's are done, its sessions are refused with ErrBusy.
func NewCore(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	core := &Core{cfg: c, log: c.Logger, agents: map[string]*agent{}}
	core.bufs.New = func() any { return new([]byte) }
	// A reader that waited a peer timeout has outwaited every silent
	// holder; only live traffic can still pass it, and then no longer does.
	core.mem = wire.NewMemory(c.ReadMemory, c.PeerTimeout)
	// A batch decompresses to at most MaxFrame bytes, as if sent raw.
	var err error
	if core.dec, err = compress.NewDecoder(int(c.MaxFrame), runtime.GOMAXPROCS(0)); err != nil {
		return nil, err
	}
	if c.Sink != nil {
		return core, nil // an ingest collector: no store
	}
	if core.st, err = store.Open(c.Store); err != nil {
		core.dec.Close()
		return nil, err
	}
	return core, nil
}

// Store returns the store the core writes to; nil for an ingest
// collector (Config.Sink).
func (c *Core) Store() *store.Store { return c.st }

// session is one agent connection's view of the core. Its methods are
// called from one goroutine, the transport's; kick may be called from
// any goroutine.
type session struct {
	core  *Core
	ag    *agent
	inst  *store.Instance
	hello wire.Hello
	log   *slog.Logger

	ifmap   []int            // session interface index -> file interface index
	ifaces  []wire.Interface // session interfaces, for the Feed
	feedEv  BatchEvent
	feedB   wire.Batch // a copy of the batch for feedEv, so the batch itself stays on the stack
	pending uint64     // highest sequence written, not yet committed
	// what was written since the last commit, counted once committed
	uncommitted struct{ batches, packets, bytes uint64 }
	stats       wire.Stats

	// uncommittedRaw is the decompressed records written since the last
	// commit: what the file received, which bounds a gzip member or zstd
	// flush (commitBytes).
	uncommittedRaw int

	kick   func()
	kicked atomic.Bool
	done   chan struct{}

	peer  Peer      // set by begin, then read-only
	since time.Time // when begin accepted it

	sink       *sinkSession // an ingest collector's (Config.Sink); nil: writing to the store
	maxPayload uint32       // the largest batch payload accepted (the Welcome's MaxFrame)
}

// Peer says where a session comes from, for AgentStats.
type Peer struct {
	Addr      string // the agent's address and port
	Transport string // "tcp", "tls", "udp" or "kafka"
	// Verified: the transport checks a checksum over every frame's
	// bytes end to end (Kafka's record-batch CRC-32C, from the
	// producer to the consumer), so batches' own are not computed
	// again (wire.BatchLimits.Verified).
	Verified bool
}

// begin validates a Hello from peer and opens a session for it. A live
// session of the same agent name is ended first (kick closes its
// transport). kick is how this session can be ended the same way.
// Errors wrap ErrRejected and say why, for the agent, or ErrBusy: the
// transport closes without a Reject, and the agent retries.
func (c *Core) begin(h *wire.Hello, peer Peer, kick func()) (*session, wire.Welcome, error) {
	if err := wire.ValidateName(h.Name); err != nil {
		c.Counters.Rejected.Add(1)
		return nil, wire.Welcome{}, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	for i, ifc := range h.Interfaces {
		if ifc.SnapLen == 0 || ifc.Name == "" {
			c.Counters.Rejected.Add(1)
			return nil, wire.Welcome{}, fmt.Errorf("%w: interface %d (%q): empty name or zero snaplen", ErrRejected, i, ifc.Name)
		}
	}
	s := &session{core: c, hello: *h, kick: kick, done: make(chan struct{}),
		log: c.log.With("agent", h.Name), peer: peer, maxPayload: c.cfg.MaxFrame}
	if c.cfg.Sink != nil {
		return c.beginSink(s)
	}

	w, err := c.st.Writer(h.Name)
	if errors.Is(err, store.ErrAgentDir) {
		// Its directory is a link (or not a directory): the agent is
		// refused, with the details in the collector's log only, until
		// an operator puts it right; nothing of it is acknowledged.
		c.Counters.Rejected.Add(1)
		return nil, wire.Welcome{}, fmt.Errorf("%w: %w: the collector's directory of agent %q is a link or not a directory", ErrRejected, store.ErrAgentDir, h.Name)
	}
	if err != nil {
		// The store cannot take the agent now: its files are being
		// repaired, another process holds it (a shared root), or its
		// lock or marks could not be read. Nothing is wrong with the
		// hello: the agent (or a writer's record) comes back later.
		return nil, wire.Welcome{}, fmt.Errorf("%w: %w", ErrBusy, err)
	}
	ag := c.agentNamed(h.Name, w)
	inst := c.st.Instance(h.Instance, h.Name)
	if inst.Name() != h.Name {
		c.Counters.Rejected.Add(1)
		return nil, wire.Welcome{}, fmt.Errorf("%w: instance id already belongs to agent %q", ErrRejected, inst.Name())
	}

	ag.handover.Lock()
	defer ag.handover.Unlock()
	if err := c.replace(ag, s); err != nil {
		return nil, wire.Welcome{}, err
	}

	// A Release (shared mode: the agent given up, then taken again)
	// ends the Writer the agent had; the store's current one writes now.
	c.mu.Lock()
	ag.w = w
	c.mu.Unlock()
	ag.w.Start(h.Host)
	s.ifmap = make([]int, len(h.Interfaces))
	s.ifaces = slices.Clone(h.Interfaces)
	for i, ifc := range h.Interfaces {
		if s.ifmap[i], err = ag.w.AddInterface(ifc); err != nil {
			return nil, wire.Welcome{}, fmt.Errorf("%w: %w", ErrRejected, err)
		}
	}
	s.inst = inst
	c.activate(ag, s)
	return s, wire.Welcome{LastSeq: inst.LastSeq(), MaxFrame: c.cfg.MaxFrame, Codecs: acceptedCodecs}, nil
}

// agentNamed returns the agent of name, made with w if it is new (w is
// nil for an ingest collector).
func (c *Core) agentNamed(name string, w *store.Writer) *agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	ag := c.agents[name]
	if ag == nil {
		ag = &agent{name: name, w: w}
		c.agents[name] = ag
	}
	return ag
}

// replace ends the agent's active session, if any, so that s can take
// its place: the newer connection wins. It waits up to 10 s for the
// old session to end (ErrBusy after). ag.handover must be held.
func (c *Core) replace(ag *agent, s *session) error {
	c.mu.Lock()
	old := ag.active
	c.mu.Unlock()
	if old == nil {
		return nil
	}
	s.log.Info("new connection replaces the current one")
	old.kicked.Store(true)
	old.kick()
	select {
	case <-old.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%w: the previous connection of %q did not end within 10s", ErrBusy, ag.name)
	}
}

// activate makes s the agent's active session. ag.handover must be
// held.
func (c *Core) activate(ag *agent, s *session) {
	s.ag, s.since = ag, time.Now()
	c.mu.Lock()
	ag.active, ag.last = s, s
	c.mu.Unlock()
	c.Counters.Sessions.Add(1)
}

// acceptedCodecs are the codecs the collector decompresses, one bit per
// wire.Codec, as sent in the Welcome.
const acceptedCodecs = 1<<wire.CodecNone | 1<<wire.CodecLZ4 | 1<<wire.CodecS2 | 1<<wire.CodecZstd

// decompress replaces b's compressed records by their decompressed form
// in a pooled buffer, which the caller returns with c.bufs.Put.
func (c *Core) decompress(b *wire.Batch) (*[]byte, error) {
	buf := c.bufs.Get().(*[]byte)
	out, err := c.dec.Decompress(*buf, b.Codec, b.Records, int(b.RawLen))
	*buf = out[:0]
	if err != nil {
		if errors.Is(err, compress.ErrTooLarge) {
			c.Counters.TooLargeRaw.Add(1)
		} else {
			c.Counters.BadCompress.Add(1)
		}
		c.bufs.Put(buf)
		return nil, fmt.Errorf("batch seq %d: %w", b.Seq, err)
	}
	c.Counters.WireBytes.Add(uint64(len(b.Records)))
	c.Counters.RawBytes.Add(uint64(len(out)))
	b.Records, b.Codec = out, wire.CodecNone
	return buf, nil
}

// limits returns the frame limits transports must apply.
func (c *Core) limits() wire.Limits { return wire.Limits{MaxFrame: c.cfg.MaxFrame} }

// batch checks a batch frame's payload and writes its packets, unless
// its sequence number shows it was written before (a duplicate, counted
// and skipped). Nothing of a malformed batch is written. The batch is
// acknowledged by the next commit. dup reports a duplicate, which the
// transport should acknowledge again at once: the agent is resending.
func (s *session) batch(flags uint8, payload []byte) (dup bool, err error) {
	// A batch over TCP may come without a checksum: the agent leaves it
	// out inside TLS, whose AEAD authenticates every byte, or was told
	// to (--checksum never). UDP parses its batches itself and refuses
	// unchecked ones.
	b, err := wire.ParseBatch(flags, payload, wire.BatchLimits{Unchecked: true, Verified: s.peer.Verified})
	if err != nil {
		return false, err
	}
	if s.sink != nil {
		return false, s.sinkBatch(&b, flags, payload)
	}
	return s.write(&b, true)
}

// write writes a parsed batch. With inOrder, a batch at or below the
// highest sequence written is a duplicate (a resend, on a transport
// that delivers in order). Without it (UDP: no resends, but datagrams
// overtake each other) the transport has told duplicates apart itself,
// and a batch below the highest written is a late one, written too; the
// high-water mark then says "the highest written", no longer "every
// batch up to it".
func (s *session) write(b *wire.Batch, inOrder bool) (dup bool, err error) {
	ag := s.ag
	if b.Codec != wire.CodecNone {
		s.core.Counters.Compressed.Add(1)
	}
	if b.Unchecked {
		s.core.Counters.Unchecked.Add(1)
	}
	now := time.Now()
	ag.lastRecv.Store(b.Seq)
	ag.lastBatch.Store(now.UnixNano())
	prev := max(s.inst.LastSeq(), s.pending)
	if inOrder && b.Seq <= prev {
		s.core.Counters.Duplicates.Add(1)
		ag.duplicates.Add(1)
		return true, nil
	}
	if obs := s.core.cfg.BatchWriteLatency; obs != nil {
		defer func() {
			if err == nil {
				obs.Observe(time.Since(now).Seconds())
			}
		}()
	}
	if b.Codec != wire.CodecNone {
		buf, err := s.core.decompress(b)
		if err != nil {
			return false, err
		}
		defer s.core.bufs.Put(buf)
	}
	if err := b.Validate(uint32(len(s.ifmap))); err != nil {
		return false, err
	}
	bytes, err := ag.w.WriteBatch(b, s.ifmap, s.inst)
	if err != nil {
		return false, s.storageFailed(err)
	}
	if inOrder && b.Seq > prev+1 {
		// An agent numbers its batches without gaps and resends all it
		// has not seen acknowledged: a gap means batches lost for good
		// before they got here (an agent bug, or acknowledged data lost
		// to an OS crash here). Counted and logged, never silent.
		s.core.Counters.MissingBatches.Add(b.Seq - prev - 1)
		ag.missing.Add(b.Seq - prev - 1)
		s.log.Warn("batches missing from the agent's sequence: lost before reaching the collector",
			"first_missing", prev+1, "last_missing", b.Seq-1)
	}
	s.pending = max(s.pending, b.Seq)
	s.uncommitted.batches++
	s.uncommitted.packets += uint64(b.Count)
	s.uncommitted.bytes += bytes
	s.uncommittedRaw += len(b.Records)
	if f := s.core.cfg.Feed; f != nil {
		s.feedEv.Agent, s.feedEv.Host = s.hello.Name, s.hello.Host
		s.feedB = *b
		s.feedEv.Ifaces, s.feedEv.Batch = s.ifaces, &s.feedB
		f.Batch(&s.feedEv)
		s.feedB = wire.Batch{}
	}
	return false, nil
}

// storageFailed handles a failed write or commit (disk full, I/O error;
// the store cut the file back to its last commit and closed it, still
// readable, or a failed rotation had): nothing written since the last
// commit is acknowledged. The error wraps ErrStorage.
func (s *session) storageFailed(err error) error {
	s.pending = s.inst.LastSeq()
	s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
	s.uncommittedRaw = 0
	return fmt.Errorf("%w: %w", ErrStorage, err)
}

// commit hands what was written to the OS (and syncs it, if the fsync
// policy is per batch) and returns the sequence number to acknowledge:
// every batch up to it is in the file.
func (s *session) commit() (uint64, error) {
	if s.sink != nil {
		return s.sink.status()
	}
	ag := s.ag
	s.uncommittedRaw = 0
	if err := ag.w.Commit(); err != nil {
		return s.inst.LastSeq(), s.storageFailed(err)
	}
	s.core.Counters.Batches.Add(s.uncommitted.batches)
	s.core.Counters.Packets.Add(s.uncommitted.packets)
	s.core.Counters.Bytes.Add(s.uncommitted.bytes)
	ag.batches.Add(s.uncommitted.batches)
	ag.packets.Add(s.uncommitted.packets)
	ag.bytes.Add(s.uncommitted.bytes)
	s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
	return s.inst.LastSeq(), nil
}

// iface declares one more interface (an Iface frame's payload). Indexes
// must come in order; re-declaring a known index identically is allowed.
func (s *session) iface(payload []byte) error {
	idx, ifc, err := wire.ParseIface(payload)
	if err != nil {
		return err
	}
	return s.addIface(idx, ifc)
}

// addIface declares interface idx, which must be the next one.
func (s *session) addIface(idx uint32, ifc wire.Interface) (err error) {
	if ifc.SnapLen == 0 || ifc.Name == "" {
		return fmt.Errorf("iface %d (%q): empty name or zero snaplen: %w", idx, ifc.Name, wire.ErrMalformed)
	}
	if int(idx) != len(s.ifmap) {
		return fmt.Errorf("iface index %d, expected %d: %w", idx, len(s.ifmap), wire.ErrMalformed)
	}
	if len(s.ifmap) >= wire.MaxInterfaces {
		return fmt.Errorf("iface: more than %d interfaces: %w", wire.MaxInterfaces, wire.ErrTooLarge)
	}
	fi := len(s.ifmap) // an ingest collector's records keep the agent's numbering
	if s.sink != nil {
		s.sink.hello = wire.AppendRecordHello(nil, &s.hello, append(slices.Clip(s.ifaces), ifc))
	} else if fi, err = s.ag.w.AddInterface(ifc); err != nil {
		return err
	}
	s.ifmap = append(s.ifmap, fi)
	s.ifaces = append(s.ifaces, ifc)
	s.log.Info("interface added", "index", idx, "name", ifc.Name, "linktype", ifc.LinkType, "snaplen", ifc.SnapLen)
	return nil
}

// recordStats records an agent's loss counters (a Stats frame's
// payload); they go into the interface statistics blocks of the file
// when it closes.
func (s *session) recordStats(payload []byte) error {
	if err := wire.ParseStats(payload, &s.stats); err != nil {
		return err
	}
	if s.sink != nil {
		return s.sinkStats(payload)
	}
	grew, err := s.ag.w.RecordStats(&s.stats, s.ifmap)
	if err != nil {
		return err
	}
	if grew {
		s.log.Warn("agent reports drops", "agent_queue_drops", s.stats.AgentDrops, "interfaces", fmt.Sprint(s.stats.Interfaces))
	}
	return nil
}

// end closes the session. After a clean goodbye the agent's file is
// closed at once; after a lost connection it stays open for IdleClose so
// a reconnect continues it; after a takeover the new session owns it.
func (s *session) end(clean bool) {
	c, ag := s.core, s.ag
	if !s.kicked.Load() && s.sink == nil {
		if clean {
			if err := ag.w.Close(); err != nil {
				s.log.Error("closing file", "err", err)
			}
		} else {
			ag.w.Linger()
		}
	}
	c.mu.Lock()
	if ag.active == s {
		ag.active = nil
	}
	c.mu.Unlock()
	close(s.done)
}

// Run rotates files on time, closes idle ones and syncs open ones
// (store.Store.Run) until ctx ends, then returns. Call Close after the
// transports have stopped.
func (c *Core) Run(ctx context.Context) {
	if c.st == nil {
		<-ctx.Done()
		return
	}
	c.st.Run(ctx)
}

// Close lets the repair of unfinished files finish for up to
// ShutdownTimeout and then stops it (the file it was on stays
// unfinished, for the next start), closes every open file and saves the
// high-water marks (see store.StateFile). Call it after all sessions
// ended and Run returned.
func (c *Core) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	var err error
	if c.st != nil {
		err = c.st.Close(ctx)
	}
	c.dec.Close()
	return err
}
