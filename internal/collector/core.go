package collector

import (
	"context"
	"errors"
	"fmt"
	"github.com/pcapsync/pcapsync/internal/compress"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// ErrRejected wraps every reason a Hello is refused; the text after it
// is what the agent is told.
var ErrRejected = errors.New("handshake rejected")

// ErrBusy: the session cannot start yet (its previous connection is
// still ending, or its files are still being repaired after a restart).
// Transports close without a Reject, which an agent takes as final, so
// that it retries with its backoff.
var ErrBusy = errors.New("busy")

// ErrStorage wraps a failed file operation: nothing since the last
// acknowledgement is acknowledged, and the file is left readable.
var ErrStorage = errors.New("storage error")

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
	FileErrors     atomic.Uint64 // failed file operations
	PeerTimeouts   atomic.Uint64 // sessions ended because the agent sent nothing for the peer timeout
	OverLimit      atomic.Uint64 // connections closed at once because MaxConns were open
	Truncated      atomic.Uint64 // packets written cut to their link type's limit (pcapfile.MaxCapLen), original length kept

	Compressed  atomic.Uint64 // compressed batches received (duplicates included)
	Unchecked   atomic.Uint64 // batches received without a checksum (duplicates included): agents inside TLS
	WireBytes   atomic.Uint64 // their records sections as received
	RawBytes    atomic.Uint64 // and decompressed
	BadCompress atomic.Uint64 // batches refused: compressed bytes corrupt
	TooLargeRaw atomic.Uint64 // batches refused: would decompress past MaxFrame (bombs)
	TooLarge    atomic.Uint64 // connections closed for a frame over a limit (MaxFrame, records per batch); also in ProtocolErrors

	FilesClosed  atomic.Uint64 // data files closed complete (rotation, goodbye, idle close, shutdown)
	FilesRotated atomic.Uint64 // of which closed because they reached RotateSize or RotateInterval
}

// Core is the transport-independent collector: it turns sessions of
// batches into files. Safe for concurrent use.
type Core struct {
	cfg Config
	log *slog.Logger
	dir string

	// Counters may be read at any time.
	Counters Counters

	mu          sync.Mutex // guards agents, agent.active, unpublished, repairing
	agents      map[string]*agent
	unpublished []string        // closed part files whose publish failed
	repairing   map[string]bool // agents whose unfinished files are being repaired
	repairDone  chan struct{}   // closed when the background repair ended
	stopRepairs func()          // cancels it; nil if none ran

	instMu    sync.Mutex // a leaf lock: guards instances, instance.seen, saved
	instances map[[16]byte]*instance
	saved     map[[16]byte]savedMark // what the state file holds
	saver     stateSaver

	dec  *compress.Decoder // shared by all sessions
	bufs sync.Pool         // *[]byte: decompressed records, returned after each batch
	mem  *wire.Memory      // ReadMemory: the TCP connections' frame buffers
}

type agent struct {
	name     string
	handover sync.Mutex // serialises Begin for this name

	mu          sync.Mutex // guards file, lingerUntil
	file        agentFile
	lingerUntil time.Time

	active *Session // guarded by Core.mu
	last   *Session // the latest session, ended or not; guarded by Core.mu

	// Totals over every session of this name, for AgentStats.
	batches, packets, bytes atomic.Uint64 // committed
	duplicates, missing     atomic.Uint64 // batches, as in Counters
	diskBytes               atomic.Uint64 // bytes written to its files on disk
	lastRecv                atomic.Uint64 // sequence of the last batch received
	lastBatch               atomic.Int64  // when it was received, Unix ns
}

// instance is one agent process. lastSeq is its high-water mark: every
// batch up to it is in a file (written and, per the fsync policy, synced).
type instance struct {
	id      [16]byte
	name    string
	lastSeq atomic.Uint64
	seen    time.Time // guarded by Core.instMu
}

// raise lifts the high-water mark to seq if it is higher.
func (in *instance) raise(seq uint64) {
	for {
		cur := in.lastSeq.Load()
		if seq <= cur || in.lastSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// NewCore returns a Core writing below cfg.Dir. It refuses a root it
// cannot write to, or on a disk already full, with an error that says
// which and why. Files a previous run left unfinished are repaired in
// the background; until an agent's are done, Begin refuses it with
// ErrBusy.
func NewCore(cfg Config) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("collector: output directory: %w", err)
	}
	if err := checkRoot(dir); err != nil {
		return nil, err
	}
	core := &Core{cfg: c, log: c.Logger, dir: dir,
		agents: map[string]*agent{}, instances: map[[16]byte]*instance{}, saved: map[[16]byte]savedMark{}}
	core.bufs.New = func() any { return new([]byte) }
	// A reader that waited a peer timeout has outwaited every silent
	// holder; only live traffic can still pass it, and then no longer does.
	core.mem = wire.NewMemory(c.ReadMemory, c.PeerTimeout)
	// A batch decompresses to at most MaxFrame bytes, as if sent raw.
	if core.dec, err = compress.NewDecoder(int(c.MaxFrame), runtime.GOMAXPROCS(0)); err != nil {
		return nil, err
	}
	if err := core.loadState(); err != nil {
		return nil, err
	}
	keepReserve(dir, 0)
	if err := core.startRepairs(); err != nil {
		return nil, err
	}
	return core, nil
}

// Session is one agent connection's view of the core. Its methods are
// called from one goroutine, the transport's; kick may be called from
// any goroutine.
type Session struct {
	core  *Core
	ag    *agent
	inst  *instance
	hello wire.Hello
	log   *slog.Logger

	ifmap   []int            // session interface index -> file interface index
	ifaces  []wire.Interface // session interfaces, for the Feed
	feedEv  BatchEvent
	feedB   wire.Batch // a copy of the batch for feedEv, so the batch itself stays on the stack
	pending uint64     // highest sequence written, not yet committed
	// what was written since the last Commit, counted once committed
	uncommitted struct{ batches, packets, bytes uint64 }
	cuts        uint64 // agentFile.cuts when pending was written
	stats       wire.Stats

	// uncommittedRaw is the decompressed records written since the last
	// Commit: what the file received, which bounds a gzip member or zstd
	// flush (commitBytes).
	uncommittedRaw int

	kick   func()
	kicked atomic.Bool
	done   chan struct{}

	peer  Peer      // set by Begin, then read-only
	since time.Time // when Begin accepted it
}

// Peer says where a session comes from, for AgentStats.
type Peer struct {
	Addr      string // the agent's address and port
	Transport string // "tcp", "tls" or "udp"
}

// Begin validates a Hello and opens a session for it. A live session of
// the same agent name is ended first (kick closes its transport). kick
// is how this session can be ended the same way. Errors wrap ErrRejected
// and say why, for the agent.
func (c *Core) Begin(h *wire.Hello, kick func()) (*Session, wire.Welcome, error) {
	return c.BeginFrom(h, Peer{}, kick)
}

// BeginFrom is Begin for a session from peer.
func (c *Core) BeginFrom(h *wire.Hello, peer Peer, kick func()) (*Session, wire.Welcome, error) {
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
	s := &Session{core: c, hello: *h, kick: kick, done: make(chan struct{}),
		log: c.log.With("agent", h.Name), peer: peer}

	c.mu.Lock()
	if c.repairing[h.Name] {
		c.mu.Unlock()
		return nil, wire.Welcome{}, fmt.Errorf("%w: the unfinished files of %q are being repaired", ErrBusy, h.Name)
	}
	ag := c.agents[h.Name]
	if ag == nil {
		ag = &agent{name: h.Name, file: agentFile{
			dir: filepath.Join(c.dir, h.Name), name: h.Name,
			size: c.cfg.RotateSize, interval: c.cfg.RotateInterval,
			fsync: c.cfg.Fsync, comp: c.cfg.FileCompress, saveState: c.saveState,
			syncObs: c.cfg.SyncLatency, counters: &c.Counters}}
		ag.file.diskBytes = &ag.diskBytes
		c.agents[h.Name] = ag
	}
	c.mu.Unlock()
	inst := c.instance(h.Instance, h.Name)
	if inst.name != h.Name {
		c.Counters.Rejected.Add(1)
		return nil, wire.Welcome{}, fmt.Errorf("%w: instance id already belongs to agent %q", ErrRejected, inst.name)
	}

	ag.handover.Lock()
	defer ag.handover.Unlock()
	c.mu.Lock()
	old := ag.active
	c.mu.Unlock()
	if old != nil {
		s.log.Info("new connection replaces the current one")
		old.kicked.Store(true)
		old.kick()
		select {
		case <-old.done:
		case <-time.After(10 * time.Second):
			return nil, wire.Welcome{}, fmt.Errorf("%w: the previous connection of %q did not end within 10s", ErrBusy, h.Name)
		}
	}

	ag.mu.Lock()
	ag.file.host = h.Host
	ag.lingerUntil = time.Time{}
	var err error
	s.ifmap = make([]int, len(h.Interfaces))
	s.ifaces = slices.Clone(h.Interfaces)
	for i, ifc := range h.Interfaces {
		if s.ifmap[i], err = ag.file.addIface(ifc); err != nil {
			break
		}
	}
	last := inst.lastSeq.Load()
	ag.mu.Unlock()
	if err != nil {
		c.Counters.FileErrors.Add(1)
		return nil, wire.Welcome{}, fmt.Errorf("%w: %w", ErrRejected, err)
	}

	s.ag, s.inst, s.since = ag, inst, time.Now()
	c.mu.Lock()
	ag.active, ag.last = s, s
	c.mu.Unlock()
	c.Counters.Sessions.Add(1)
	return s, wire.Welcome{LastSeq: last, MaxFrame: c.cfg.MaxFrame, Codecs: AcceptedCodecs}, nil
}

// AcceptedCodecs are the codecs the collector decompresses, one bit per
// wire.Codec, as sent in the Welcome.
const AcceptedCodecs = 1<<wire.CodecNone | 1<<wire.CodecLZ4 | 1<<wire.CodecS2 | 1<<wire.CodecZstd

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

// Limits returns the frame limits transports must apply.
func (c *Core) Limits() wire.Limits { return wire.Limits{MaxFrame: c.cfg.MaxFrame} }

// Batch checks a batch frame's payload and writes its packets, unless
// its sequence number shows it was written before (a duplicate, counted
// and skipped). Nothing of a malformed batch is written. The batch is
// acknowledged by the next Commit. dup reports a duplicate, which the
// transport should acknowledge again at once: the agent is resending.
func (s *Session) Batch(flags uint8, payload []byte) (dup bool, err error) {
	// A batch over TCP may come without a checksum: the agent leaves it
	// out inside TLS, whose AEAD authenticates every byte, or was told
	// to (--checksum never). UDP parses its batches itself and refuses
	// unchecked ones.
	b, err := wire.ParseBatch(flags, payload, wire.BatchLimits{Unchecked: true})
	if err != nil {
		return false, err
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
func (s *Session) write(b *wire.Batch, inOrder bool) (dup bool, err error) {
	ag := s.ag
	ag.mu.Lock()
	defer ag.mu.Unlock()
	if b.Codec != wire.CodecNone {
		s.core.Counters.Compressed.Add(1)
	}
	if b.Unchecked {
		s.core.Counters.Unchecked.Add(1)
	}
	now := time.Now()
	ag.lastRecv.Store(b.Seq)
	ag.lastBatch.Store(now.UnixNano())
	prev := max(s.inst.lastSeq.Load(), s.pending)
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
	if err := ag.file.writable(now); err != nil {
		return false, s.storageFailed(err)
	}
	var r wire.Record
	var bytes uint64
	it := b.Iter(uint32(len(s.ifmap)))
	for i := uint32(1); it.Next(&r) == nil; i++ {
		var err error
		if i < b.Count {
			err = ag.file.write(s.ifmap[r.IfIndex], &r)
		} else {
			err = ag.file.writeLast(s.ifmap[r.IfIndex], &r, s.inst, b.Seq)
		}
		if err != nil {
			return false, s.storageFailed(err)
		}
		bytes += uint64(len(r.Data))
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
	s.pending, s.cuts = max(s.pending, b.Seq), ag.file.cuts
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

// storageFailed handles a failed write (disk full, I/O error): the file
// is cut back to its last committed batch and closed, still readable,
// and nothing written since the last Commit is acknowledged. ag.mu must
// be held. The error wraps ErrStorage.
func (s *Session) storageFailed(err error) error {
	s.core.Counters.FileErrors.Add(1)
	if aerr := s.ag.file.abandon(); aerr != nil {
		s.log.Error("cutting back the file after a write error", "err", aerr)
	}
	s.pending = s.inst.lastSeq.Load()
	s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
	s.uncommittedRaw = 0
	return fmt.Errorf("%w: %w", ErrStorage, err)
}

// Commit hands what was written to the OS (and syncs it, if the fsync
// policy is per batch) and returns the sequence number to acknowledge:
// every batch up to it is in the file.
func (s *Session) Commit() (uint64, error) {
	ag := s.ag
	ag.mu.Lock()
	defer ag.mu.Unlock()
	s.uncommittedRaw = 0
	if err := ag.file.flush(); err != nil {
		return s.inst.lastSeq.Load(), s.storageFailed(err)
	}
	if s.cuts != ag.file.cuts {
		// A rotation failed and cut the file back past our pending
		// batches: they are not in any file.
		s.pending = s.inst.lastSeq.Load()
		s.cuts = ag.file.cuts
		s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
		return s.pending, fmt.Errorf("%w: file was cut back after a write error", ErrStorage)
	}
	s.inst.raise(s.pending)
	s.core.Counters.Batches.Add(s.uncommitted.batches)
	s.core.Counters.Packets.Add(s.uncommitted.packets)
	s.core.Counters.Bytes.Add(s.uncommitted.bytes)
	ag.batches.Add(s.uncommitted.batches)
	ag.packets.Add(s.uncommitted.packets)
	ag.bytes.Add(s.uncommitted.bytes)
	s.uncommitted.batches, s.uncommitted.packets, s.uncommitted.bytes = 0, 0, 0
	return s.inst.lastSeq.Load(), nil
}

// Iface declares one more interface (an Iface frame's payload). Indexes
// must come in order; re-declaring a known index identically is allowed.
func (s *Session) Iface(payload []byte) error {
	idx, ifc, err := wire.ParseIface(payload)
	if err != nil {
		return err
	}
	return s.addIface(idx, ifc)
}

// addIface declares interface idx, which must be the next one.
func (s *Session) addIface(idx uint32, ifc wire.Interface) error {
	if ifc.SnapLen == 0 || ifc.Name == "" {
		return fmt.Errorf("iface %d (%q): empty name or zero snaplen: %w", idx, ifc.Name, wire.ErrMalformed)
	}
	if int(idx) != len(s.ifmap) {
		return fmt.Errorf("iface index %d, expected %d: %w", idx, len(s.ifmap), wire.ErrMalformed)
	}
	if len(s.ifmap) >= wire.MaxInterfaces {
		return fmt.Errorf("iface: more than %d interfaces: %w", wire.MaxInterfaces, wire.ErrTooLarge)
	}
	s.ag.mu.Lock()
	fi, err := s.ag.file.addIface(ifc)
	s.ag.mu.Unlock()
	if err != nil {
		return err
	}
	s.ifmap = append(s.ifmap, fi)
	s.ifaces = append(s.ifaces, ifc)
	s.log.Info("interface added", "index", idx, "name", ifc.Name, "linktype", ifc.LinkType, "snaplen", ifc.SnapLen)
	return nil
}

// Stats records an agent's loss counters (a Stats frame's payload); they
// go into the interface statistics blocks of the file when it closes.
func (s *Session) Stats(payload []byte) error {
	if err := wire.ParseStats(payload, &s.stats); err != nil {
		return err
	}
	ag := s.ag
	ag.mu.Lock()
	defer ag.mu.Unlock()
	grew := s.stats.AgentDrops > ag.file.agentDrops
	ag.file.agentDrops = s.stats.AgentDrops
	for _, st := range s.stats.Interfaces {
		if int(st.Index) >= len(s.ifmap) {
			return fmt.Errorf("stats for interface %d, %d declared: %w", st.Index, len(s.ifmap), wire.ErrMalformed)
		}
		fi := &ag.file.ifaces[s.ifmap[st.Index]]
		grew = grew || st.KernelDrops > fi.stats.KernelDrops
		fi.stats, fi.haveStats, fi.statsTime = st, true, s.stats.Time
	}
	if grew {
		s.log.Warn("agent reports drops", "agent_queue_drops", s.stats.AgentDrops, "interfaces", fmt.Sprint(s.stats.Interfaces))
	}
	return nil
}

// End closes the session. After a clean goodbye the agent's file is
// closed at once; after a lost connection it stays open for IdleClose so
// a reconnect continues it; after a takeover the new session owns it.
func (s *Session) End(clean bool) {
	c, ag := s.core, s.ag
	if !s.kicked.Load() {
		ag.mu.Lock()
		if clean {
			if err := ag.file.close(time.Now()); err != nil {
				c.Counters.FileErrors.Add(1)
				s.log.Error("closing file", "err", err)
			}
		} else {
			ag.lingerUntil = time.Now().Add(c.cfg.IdleClose)
		}
		ag.mu.Unlock()
	}
	c.mu.Lock()
	if ag.active == s {
		ag.active = nil
	}
	c.mu.Unlock()
	close(s.done)
}

// Run rotates files on time and closes idle ones until ctx ends, then
// returns. Call Close after the transports have stopped.
func (c *Core) Run(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			c.tick(now)
		}
	}
}

func (c *Core) tick(now time.Time) {
	c.mu.Lock()
	ags := make([]*agent, 0, len(c.agents))
	for _, ag := range c.agents {
		ags = append(ags, ag)
	}
	parts := c.unpublished // closed earlier, publish failed: retried
	c.unpublished = nil
	c.mu.Unlock()
	for _, ag := range ags {
		ag.mu.Lock()
		parts = append(parts, ag.file.unpublished...) // retried every tick
		ag.file.unpublished = nil
		var err error
		var part string
		var syncF *os.File
		if ag.file.due(now) || !ag.lingerUntil.IsZero() && now.After(ag.lingerUntil) {
			if ag.file.due(now) {
				ag.file.rotated()
			}
			ag.lingerUntil = time.Time{}
			part, err = ag.file.closeFile(now)
		} else {
			syncF = ag.file.syncDue(now)
		}
		ag.mu.Unlock()
		if part != "" {
			parts = append(parts, part)
		}
		if syncF != nil {
			serr := syncFile(c.cfg.SyncLatency, syncF)
			if errors.Is(serr, os.ErrClosed) {
				serr = nil // rotated meanwhile; close synced it
			}
			ag.mu.Lock()
			err = ag.file.synced(syncF, now, serr)
			ag.mu.Unlock()
		}
		if err != nil {
			c.Counters.FileErrors.Add(1)
			c.log.Error("closing file", "agent", ag.name, "err", err)
		}
	}
	if len(parts) > 0 {
		if err := publish(c.saveState, c.cfg.Fsync != FsyncNever, parts); err != nil {
			c.Counters.FileErrors.Add(1)
			c.log.Error("publishing closed files; retrying next tick", "files", len(parts), "err", err)
			c.mu.Lock()
			c.unpublished = append(c.unpublished, parts...)
			c.mu.Unlock()
		}
	}
}

// Close lets the repair of unfinished files finish for up to
// ShutdownTimeout and then stops it (the file it was on stays
// unfinished, for the next start), closes every open file and saves the
// high-water marks (see StateFile). Call it after all sessions ended.
func (c *Core) Close() error {
	select {
	case <-c.repairDone:
	case <-time.After(c.cfg.ShutdownTimeout):
		if c.stopRepairs != nil {
			c.stopRepairs()
		}
		<-c.repairDone
	}
	c.mu.Lock()
	ags := make([]*agent, 0, len(c.agents))
	for _, ag := range c.agents {
		ags = append(ags, ag)
	}
	parts := c.unpublished
	c.unpublished = nil
	c.mu.Unlock()
	var errs []error
	for _, ag := range ags {
		ag.mu.Lock()
		part, err := ag.file.closeFile(time.Now())
		parts = append(parts, ag.file.unpublished...)
		ag.file.unpublished = nil
		ag.mu.Unlock()
		if part != "" {
			parts = append(parts, part)
		}
		errs = append(errs, err)
	}
	// One state save for all of them (and for instances without files).
	errs = append(errs, publish(c.saveState, c.cfg.Fsync != FsyncNever, parts))
	c.dec.Close()
	return errors.Join(errs...)
}

// instance returns the instance with id, creating it for name.
func (c *Core) instance(id [16]byte, name string) *instance {
	c.instMu.Lock()
	defer c.instMu.Unlock()
	in := c.instances[id]
	if in == nil {
		in = &instance{id: id, name: name}
		c.instances[id] = in
	}
	in.seen = time.Now()
	return in
}
