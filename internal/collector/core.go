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
// batches into files, through a store.Store, or into records, through
// a Sink (Config.Sink: an ingest collector). Safe for concurrent use.
type Core struct {
	cfg  Config
	log  *slog.Logger
	dest destination // chosen once, in NewCore

	// Counters may be read at any time; the files' own counters are
	// Store().Counters.
	Counters Counters

	mu     sync.Mutex // guards agents, agent.active, agent.last
	agents map[string]*agent

	dec  *compress.Decoder // shared by all sessions
	bufs sync.Pool         // *[]byte: decompressed records, returned after each batch
	mem  *wire.Memory      // ReadMemory: the TCP connections' frame buffers
}

// agent is one agent name: its files (in the store's Writer, used by
// one session at a time: handover), its sessions and its totals.
type agent struct {
	name     string
	handover sync.Mutex // serialises begin for this name
	// app is the appender of the latest session begun (a store's: the
	// Writer of the name, a new one after store.Store.Release), set
	// by begin under Core.mu; AgentStats reads the files' stats there.
	app appender

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
	if core.dest, err = newDestination(&c); err != nil {
		core.dec.Close()
		return nil, err
	}
	return core, nil
}

// newDestination opens the store cfg names, or takes its Sink (an
// ingest collector: no store).
func newDestination(cfg *Config) (destination, error) {
	if cfg.Sink != nil {
		return sinkDest{cfg.Sink}, nil
	}
	st, err := store.Open(cfg.Store)
	if err != nil {
		return nil, err
	}
	return storeDest{st}, nil
}

// Store returns the store the core writes to; nil for an ingest
// collector (Config.Sink).
func (c *Core) Store() *store.Store { return c.dest.store() }

// session is one agent connection's view of the core. Its methods are
// called from one goroutine, the transport's; kick may be called from
// any goroutine.
type session struct {
	core  *Core
	ag    *agent
	app   appender // where its batches go
	hello wire.Hello
	log   *slog.Logger

	ifmap   []int            // session interface index -> file interface index
	ifaces  []wire.Interface // session interfaces, for the Feed
	feedEv  BatchEvent
	feedB   wire.Batch // a copy of the batch for feedEv, so the batch itself stays on the stack
	pending uint64     // highest sequence written, not yet committed
	// what was written since the last commit, counted once committed
	uncommitted struct{ batches, packets, bytes uint64 }
	gaps        bool // the agent's mark is known: a sequence that skips ahead is counted missing
	stats       wire.Stats
	// version is the agent's software version as its Info frame (or
	// its Kafka records' info header) said; nil before any.
	version atomic.Pointer[string]

	// uncommittedRaw is the decompressed records written since the last
	// commit: what the file received, which bounds a gzip member or zstd
	// flush (commitBytes).
	uncommittedRaw int

	kick   func()
	kicked atomic.Bool
	done   chan struct{}

	peer  Peer      // set by begin, then read-only
	since time.Time // when begin accepted it
	ended time.Time // when end ran; guarded by Core.mu

	maxPayload uint32 // the largest batch payload accepted (the Welcome's MaxFrame)
	// onAck, if set before the first frame, is called (from another
	// goroutine) when batches became durable after the session handled
	// them (a Sink's): the transport acknowledges them.
	onAck func(seq uint64)
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
	app, err := c.dest.open(s)
	if err != nil {
		return nil, wire.Welcome{}, err
	}
	s.app = app
	ag := c.agentNamed(h.Name, app)

	ag.handover.Lock()
	defer ag.handover.Unlock()
	if err := c.replace(ag, s); err != nil {
		return nil, wire.Welcome{}, err
	}

	// A Release (shared mode: the agent given up, then taken again)
	// ends the Writer the agent had; the store's current one writes now.
	c.mu.Lock()
	ag.app = app
	c.mu.Unlock()
	s.ifaces = slices.Clone(h.Interfaces)
	last, known, err := app.start(s)
	if err != nil {
		return nil, wire.Welcome{}, err
	}
	s.gaps = known
	c.activate(ag, s)
	return s, wire.Welcome{LastSeq: last, MaxFrame: s.maxPayload, Codecs: acceptedCodecs | wire.FeatureInfo}, nil
}

// agentNamed returns the agent of name, made with app if it is new.
func (c *Core) agentNamed(name string, app appender) *agent {
	c.mu.Lock()
	defer c.mu.Unlock()
	ag := c.agents[name]
	if ag == nil {
		ag = &agent{name: name, app: app}
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
	return s.write(&b, flags, payload, true)
}

// write writes a parsed batch (flags and payload: its frame's). With
// inOrder, a batch at or below the highest sequence written is a
// duplicate (a resend, on a transport that delivers in order). Without
// it (UDP: no resends, but datagrams overtake each other) the transport
// has told duplicates apart itself, and a batch below the highest
// written is a late one, written too; the high-water mark then says
// "the highest written", no longer "every batch up to it".
func (s *session) write(b *wire.Batch, flags uint8, payload []byte, inOrder bool) (dup bool, err error) {
	ag := s.ag
	if b.Codec != wire.CodecNone {
		s.core.Counters.Compressed.Add(1)
	}
	if b.Unchecked {
		s.core.Counters.Unchecked.Add(1)
	}
	ag.lastRecv.Store(b.Seq)
	ag.lastBatch.Store(time.Now().UnixNano())
	prev := max(s.app.durable(), s.pending)
	if inOrder && b.Seq <= prev {
		s.core.Counters.Duplicates.Add(1)
		ag.duplicates.Add(1)
		return true, nil
	}
	if err := s.app.append(s, *b, flags, payload); err != nil {
		return false, err
	}
	if inOrder && s.gaps && b.Seq > prev+1 {
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
	return false, nil
}

// count counts batches, packets and bytes that became durable, for the
// core and the agent. Safe for concurrent use.
func (s *session) count(batches, packets, bytes uint64) {
	k, ag := &s.core.Counters, s.ag
	k.Batches.Add(batches)
	k.Packets.Add(packets)
	k.Bytes.Add(bytes)
	ag.batches.Add(batches)
	ag.packets.Add(packets)
	ag.bytes.Add(bytes)
}

// commit hands what was written to the OS (and syncs it, if the fsync
// policy is per batch) and returns the sequence number to acknowledge:
// every batch up to it is in the file.
func (s *session) commit() (uint64, error) { return s.app.commit(s) }

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
func (s *session) addIface(idx uint32, ifc wire.Interface) error {
	if ifc.SnapLen == 0 || ifc.Name == "" {
		return fmt.Errorf("iface %d (%q): empty name or zero snaplen: %w", idx, ifc.Name, wire.ErrMalformed)
	}
	if int(idx) != len(s.ifmap) {
		return fmt.Errorf("iface index %d, expected %d: %w", idx, len(s.ifmap), wire.ErrMalformed)
	}
	if len(s.ifmap) >= wire.MaxInterfaces {
		return fmt.Errorf("iface: more than %d interfaces: %w", wire.MaxInterfaces, wire.ErrTooLarge)
	}
	fi, err := s.app.addIface(s, ifc)
	if err != nil {
		return err
	}
	s.ifmap = append(s.ifmap, fi)
	s.ifaces = append(s.ifaces, ifc)
	s.log.Info("interface added", "index", idx, "name", ifc.Name, "linktype", ifc.LinkType, "snaplen", ifc.SnapLen)
	return nil
}

// info takes an Info payload: the agent's version, for AgentStats.
// Nothing on the per-packet path reads it.
func (s *session) info(payload []byte) error {
	in, err := wire.ParseInfo(payload)
	if err != nil {
		return err
	}
	s.setVersion(in.Version)
	s.app.info(&in)
	return nil
}

// setVersion records the agent's version; "" leaves it unknown.
func (s *session) setVersion(v string) {
	if v != "" {
		s.version.Store(&v)
		s.log.Info("agent version", "version", v)
	}
}

// recordStats records an agent's loss counters (a Stats frame's
// payload); they go into the interface statistics blocks of the file
// when it closes.
func (s *session) recordStats(payload []byte) error {
	if err := wire.ParseStats(payload, &s.stats); err != nil {
		return err
	}
	return s.app.stats(s, payload)
}

// end closes the session. After a clean goodbye the agent's file is
// closed at once; after a lost connection it stays open for IdleClose so
// a reconnect continues it; after a takeover the new session owns it.
func (s *session) end(clean bool) {
	c, ag := s.core, s.ag
	s.app.end(s, clean)
	c.mu.Lock()
	if ag.active == s {
		ag.active = nil
	}
	s.ended = time.Now()
	c.mu.Unlock()
	close(s.done)
}

// Run rotates files on time, closes idle ones and syncs open ones
// (store.Store.Run) until ctx ends, then returns. Call Close after the
// transports have stopped.
func (c *Core) Run(ctx context.Context) { c.dest.run(ctx) }

// Close lets the repair of unfinished files finish for up to
// ShutdownTimeout and then stops it (the file it was on stays
// unfinished, for the next start), closes every open file and saves the
// high-water marks (see store.StateFile). Call it after all sessions
// ended and Run returned.
func (c *Core) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	err := c.dest.close(ctx)
	c.dec.Close()
	return err
}
