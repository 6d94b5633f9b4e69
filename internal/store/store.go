package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Counters are a Store's totals since Open. Safe for concurrent use.
type Counters struct {
	FileErrors   atomic.Uint64 // failed file operations: writes, syncs, closes, state saves, repairs
	FilesClosed  atomic.Uint64 // data files closed complete (rotation, goodbye, idle close, shutdown)
	FilesRotated atomic.Uint64 // of which closed because they reached RotateSize or RotateInterval
	Truncated    atomic.Uint64 // packets written cut to their link type's limit (pcapfile.MaxCapLen), original length kept
	// Writer calls refused because the agent's directory is a symbolic
	// link or not a directory (ErrAgentDir).
	AgentDirRefused atomic.Uint64
	IndexErrors     atomic.Uint64 // index writes that failed: the data file is left without an index (readers scan it; pcapsync index rebuilds it)
	FlowErrors      atomic.Uint64 // flow file writes that failed: the data file is left without a flow file (pcapsync index rebuilds it)
	FlowRecords     atomic.Uint64 // flow records written to flow files (Config.Flows)
	FlowsEvicted    atomic.Uint64 // flows ended early because a file's flow table held Config.FlowTable.MaxFlows

	// The open-file budget (Config.MaxOpenFiles): files parked (their
	// descriptor closed, the file kept .part) to open another agent's,
	// and parked files reopened for append.
	BudgetParks   atomic.Uint64
	BudgetReopens atomic.Uint64
}

// Store owns an output root: the agents' files, their batch marks and
// the instances' high-water marks, the state file, the reserve and the
// repair of files a previous run left unfinished. Safe for concurrent
// use.
type Store struct {
	cfg Config
	log *slog.Logger
	dir string

	// Counters may be read at any time.
	Counters Counters

	mu          sync.Mutex // guards writers, unpublished, repairing, moving, closed
	writers     map[string]*Writer
	unpublished []string        // closed part files whose publish failed
	repairing   map[string]bool // agents whose unfinished files are being repaired
	moving      map[string]bool // agents being taken (Shared) or released
	closed      bool            // Close gave the agents back (Shared): Writer refuses
	repairDone  chan struct{}   // closed when the background repair ended
	stopRepairs func()          // cancels it; nil if none ran

	instMu     sync.Mutex // a leaf lock: guards instances, Instance.seen, saved, savedAgent, held
	instances  map[[16]byte]*Instance
	saved      map[[16]byte]savedMark            // what the state file holds
	savedAgent map[string]map[[16]byte]savedMark // Shared: what each held agent's state file holds
	held       map[string]bool                   // Shared: the agents this Store holds the lock of
	saver      stateSaver
	pubMu      sync.RWMutex // Shared: a tick's publish (read) against an agent's release (write)

	budget *fileBudget         // nil: no budget
	mode   rootMode            // owned or shared (mode.go); chosen by open
	ret    *retention.Enforcer // retention (internal/retention), fed by the writers (retain.go)
	owner  *os.File            // holds the root's owner lock (OwnerFile) until Close
}

// Instance is one agent process, known by the 16-byte id of its hello.
// Its high-water mark (LastSeq) is the highest batch sequence number
// whose batch is in a file (written and, per the fsync policy, synced);
// the Store raises it in Commit, when files close and when repair finds
// marks, never lowers it, and keeps it across restarts in the files and
// the state file. Safe for concurrent use.
type Instance struct {
	id      [16]byte
	name    string
	lastSeq atomic.Uint64
	seen    time.Time // guarded by Store.instMu
}

// ID returns the instance id.
func (in *Instance) ID() [16]byte { return in.id }

// Name returns the agent name the instance belongs to: the name it was
// first seen with (Store.Instance).
func (in *Instance) Name() string { return in.name }

// LastSeq returns the high-water mark.
func (in *Instance) LastSeq() uint64 { return in.lastSeq.Load() }

// raise lifts the high-water mark to seq if it is higher.
func (in *Instance) raise(seq uint64) {
	for {
		cur := in.lastSeq.Load()
		if seq <= cur || in.lastSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Open returns a Store writing below cfg.Dir. It refuses a root it
// cannot write to, or on a disk already full, with an error that says
// which and why, and a root another owner holds (ErrRootBusy, see
// OwnerFile); it loads the state file and (re)creates the reserve.
// Files a previous run left unfinished are repaired in the background;
// until an agent's are done, Writer refuses it with ErrBusy (in Shared
// mode Open repairs nothing: Writer repairs an agent's files when it
// takes the agent). Call Run for rotation by time, idle close and
// interval syncs, and Close at the end.
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("store: output directory: %w", err)
	}
	if err := checkRoot(dir); err != nil {
		return nil, err
	}
	owner, err := lockRoot(dir, c.Shared, c.Group)
	if err != nil {
		return nil, err
	}
	s, err := open(c, dir)
	if err != nil {
		owner.Close()
		return nil, err
	}
	s.owner = owner
	return s, nil
}

// open is Open's work once the root is locked.
func open(c Config, dir string) (*Store, error) {
	s := &Store{cfg: c, log: c.Logger, dir: dir, writers: map[string]*Writer{}, moving: map[string]bool{},
		instances: map[[16]byte]*Instance{}, saved: map[[16]byte]savedMark{},
		savedAgent: map[string]map[[16]byte]savedMark{}, held: map[string]bool{}}
	s.budget = newFileBudget(c.MaxOpenFiles, &s.Counters)
	s.mode = newMode(s)
	if err := s.loadState(); err != nil {
		return nil, err
	}
	keepReserve(dir, 0)
	s.ret = s.newEnforcer()
	if err := s.mode.start(); err != nil {
		return nil, err
	}
	return s, nil
}

// Dir returns the absolute output root.
func (s *Store) Dir() string { return s.dir }

// Repaired returns a channel that is closed once the repair of the
// files a previous run left unfinished, started by Open, has ended
// (every agent's done, or stopped by Close).
func (s *Store) Repaired() <-chan struct{} { return s.repairDone }

// Instance returns the instance with id, created for name if it is new
// (its mark then starts at 0), and notes that it was seen now (the
// state file forgets instances not seen for a week). An instance keeps
// the name it was first seen with: the caller compares Name with the
// name it expects. In Shared mode the marks of an agent's instances are
// loaded when Writer takes the agent, so call Writer(name) first; an id
// is checked against the names this Store has seen or loaded (the state
// files of agents it never took are not read).
func (s *Store) Instance(id [16]byte, name string) *Instance {
	s.instMu.Lock()
	defer s.instMu.Unlock()
	in := s.instances[id]
	if in == nil {
		in = &Instance{id: id, name: name}
		s.instances[id] = in
	}
	in.seen = time.Now()
	return in
}

// Writer returns the Writer of agent name, created at the first call;
// every later call returns the same one until Release. It fails with an
// error wrapping ErrBusy while the agent's unfinished files are being
// repaired or it is being released, and refuses a name that is not a
// valid agent name (wire.ValidateName), which keeps every file below
// Dir/<name>/, and an agent whose Dir/<name> is a symbolic link or not
// a directory (ErrAgentDir: nothing of the agent is written through it;
// every call checks again).
//
// In Shared mode the first call takes the agent (see shared.go): it
// locks it, failing at once with ErrBusy when another process or Store
// holds it, loads its marks and repairs its unfinished files before it
// returns (for as long as that takes; other calls for the agent get
// ErrBusy meanwhile). After Close it fails with ErrReleased.
func (s *Store) Writer(name string) (*Writer, error) {
	if err := wire.ValidateName(name); err != nil {
		return nil, fmt.Errorf("store: agent name: %w", err)
	}
	if err := s.checkAgentDir(name); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return nil, fmt.Errorf("agent %q: store closed: %w", name, ErrReleased)
	case s.repairing[name]:
		return nil, fmt.Errorf("agent %q: files being repaired: %w", name, ErrBusy)
	case s.moving[name]:
		return nil, fmt.Errorf("agent %q: being taken or released: %w", name, ErrBusy)
	}
	if w := s.writers[name]; w != nil {
		return w, nil
	}
	w, err := s.mode.writer(name)
	if err != nil {
		return nil, err
	}
	s.writers[name] = w
	return w, nil
}

// checkAgentDir refuses agent name when its directory is there but is
// not a directory, or is a symbolic link: writing through it would put
// the agent's files outside the root, beyond retention and queries.
func (s *Store) checkAgentDir(name string) error {
	err := safefs.Dir(filepath.Join(s.dir, name))
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	s.Counters.AgentDirRefused.Add(1)
	s.log.Error("agent refused: its directory is a link or not a directory; move it away to take the agent's data", "agent", name, "err", err)
	return fmt.Errorf("store: agent %q: %w: %w", name, ErrAgentDir, err)
}

// newWriter returns a new Writer of agent name.
func (s *Store) newWriter(name string) *Writer {
	w := &Writer{st: s, name: name, file: agentFile{
		dir: filepath.Join(s.dir, name), name: name,
		size: s.cfg.RotateSize, interval: s.cfg.RotateInterval,
		fsync: s.cfg.Fsync, comp: s.cfg.FileCompress, zframes: s.cfg.ZstdFrames,
		syncObs: s.cfg.SyncLatency, counters: &s.Counters, ixBlock: s.cfg.IndexBlock,
		flOn: s.cfg.Flows, flCfg: s.cfg.FlowTable}}
	w.file.diskBytes = &w.diskBytes
	w.file.log, w.file.budget, w.file.mu, w.file.slot = s.log, s.budget, &w.mu, -1
	w.file.ret = s.ret.Agent(name)
	w.file.saveState = func() error { return s.mode.saveMarks(name) }
	return w
}

// Run rotates files on time, closes idle ones (Writer.Linger), syncs
// open files under an interval policy and retries publishing closed
// files, every 250 ms, and deletes files for retention (Config.Retain)
// on a goroutine of its own, until ctx ends; then it returns. Call
// Close after Run returned.
func (s *Store) Run(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	if !s.cfg.Retain.Off() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.ret.Run(ctx, s.repairDone)
		}()
		defer func() { <-done }()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.tick(now)
		}
	}
}

func (s *Store) tick(now time.Time) {
	s.mu.Lock()
	ws := make([]*Writer, 0, len(s.writers))
	for _, w := range s.writers {
		ws = append(ws, w)
	}
	parts := s.unpublished // closed earlier, publish failed: retried
	s.unpublished = nil
	s.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		if w.released { // Release took its files
			w.mu.Unlock()
			continue
		}
		parts = append(parts, w.file.unpublished...) // retried every tick
		w.file.unpublished = nil
		var err error
		var part string
		var syncF *os.File
		var syncPath string
		if w.file.due(now) || !w.lingerUntil.IsZero() && now.After(w.lingerUntil) {
			if w.file.due(now) {
				w.file.rotated()
			}
			w.lingerUntil = time.Time{}
			part, err = w.file.closeFile(now)
		} else {
			syncF = w.file.syncDue(now)
			syncPath = w.file.parkedSyncDue(now)
		}
		w.mu.Unlock()
		if part != "" {
			parts = append(parts, part)
		}
		if syncPath != "" {
			err = s.syncParked(w, syncPath, now)
		}
		if syncF != nil {
			serr := syncFile(s.cfg.SyncLatency, syncF)
			if errors.Is(serr, os.ErrClosed) {
				serr = nil // rotated meanwhile; close synced it
			}
			w.mu.Lock()
			err = w.file.synced(syncF, now, serr)
			w.mu.Unlock()
		}
		if err != nil {
			s.Counters.FileErrors.Add(1)
			s.log.Error("closing file", "agent", w.name, "err", err)
		}
	}
	if len(parts) > 0 {
		if err := s.mode.publish(parts); err != nil {
			s.Counters.FileErrors.Add(1)
			s.log.Error("publishing closed files; retrying next tick", "files", len(parts), "err", err)
			s.mu.Lock()
			s.unpublished = append(s.unpublished, parts...)
			s.mu.Unlock()
		}
	}
}

// Close lets the repair of unfinished files finish until ctx ends and
// then stops it (the file it was on stays unfinished, for the next
// start), closes every open file and saves the high-water marks (see
// StateFile). Call it after the last Writer call returned and Run
// returned; the Store is not used afterwards.
func (s *Store) Close(ctx context.Context) error {
	select {
	case <-s.repairDone:
	case <-ctx.Done():
		if s.stopRepairs != nil {
			s.stopRepairs()
		}
		<-s.repairDone
	}
	s.mu.Lock()
	ws := make([]*Writer, 0, len(s.writers))
	for _, w := range s.writers {
		ws = append(ws, w)
	}
	parts := s.unpublished
	s.unpublished = nil
	s.mu.Unlock()
	// Open files first: their descriptors then serve the parked ones,
	// which are reopened to be closed.
	slices.SortStableFunc(ws, func(a, b *Writer) int {
		return cmp.Compare(b2i(a.isParked()), b2i(b.isParked()))
	})
	var errs []error
	for _, w := range ws {
		w.mu.Lock()
		part, err := w.file.closeFile(time.Now())
		parts = append(parts, w.file.unpublished...)
		w.file.unpublished = nil
		w.mu.Unlock()
		if part != "" {
			parts = append(parts, part)
		}
		errs = append(errs, err)
	}
	// One state save for all of them (and for instances without files).
	errs = append(errs, publish(s.saveState, s.cfg.Fsync != FsyncNever, parts))
	s.ret.Save()
	s.mode.closing(ws)
	if s.owner != nil {
		s.owner.Close() // gives the root back
	}
	return errors.Join(errs...)
}
