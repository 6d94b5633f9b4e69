package retention

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Enforcer keeps an output root within the rules of a Config (see the
// package doc): it holds the index of closed files, deletes on a
// goroutine of its own (Run) and holds writers back at the write gate
// when deletion falls behind. Its methods are safe for concurrent use.
type Enforcer struct {
	cfg    Config
	dir    string
	rotate int64
	log    *slog.Logger
	errs   *atomic.Uint64 // Options.Errors
	statfs func(dir string) (size, avail int64, err error)
	open   func() (done func()) // Options.Open; nil for none

	// missed, when not nil, is called by delete after an unlink found
	// no file and before it looks for the file's .part (tests: a
	// publish in between).
	missed func(path string)

	// Counters may be read at any time.
	Counters Counters
	// marks are each rule's limit and watermarks as enforce last
	// computed them (the high one moves with the write rate); zero
	// until then.
	marks [NumRules]struct{ limit, hi, lo atomic.Int64 }

	kick    chan struct{} // capacity 1: wakes run
	gate    *writeGate    // holds writers back when deletion falls behind (gate.go)
	loaded  atomic.Bool   // the index was rebuilt from the directory (load)
	step    atomic.Int64  // bytes written between two wake-ups
	pending atomic.Int64  // bytes written since the last wake-up
	written atomic.Int64  // bytes written since Open

	// The write rate (bytes/s; its recent peak) and where it was last
	// measured: the goroutine of enforce only.
	rate    float64
	rateAt  time.Time
	rateSum int64
	goneAt  time.Time // when enforce last looked for agent directories gone (dropGone)

	mu sync.Mutex // a leaf lock: guards agents, held, the Agent fields it names, short, fsSize, reported
	// reported: the paths foreign reported; reportedFull: it stopped
	// reporting at maxForeign of them.
	reported     map[string]bool
	reportedFull bool
	agents       map[string]*Agent
	held         map[string]int // paths held by readers
	short        [NumRules]time.Time
	fsSize       int64
	saved        time.Time // when dirty indexes were last saved (guarded by shared.saveMu)

	shared sharedRetainer // Shared mode (shared.go)
}

// Agent is one agent's files as retention sees them.
type Agent struct {
	r    *Enforcer
	name string

	open      atomic.Int64 // bytes of the open file, as of its last flush
	admitted  atomic.Int64 // bytes let through the write gate since then: written, or about to be, not yet flushed
	buffered  atomic.Int64 // bytes in the file's write buffer after the last batch: not yet on the filesystem
	openFirst atomic.Int64 // first packet of the open file (Unix ns); 0: none
	shared    sharedAgent  // Shared mode (shared.go)

	files       []layout.IndexedFile // closed files, oldest first (by last, then name); guarded by Enforcer.mu
	closedBytes int64                // their bytes; guarded by Enforcer.mu
	dirty       bool                 // files changed since the index was saved; guarded by Enforcer.mu
	// removed: what retention removed of the agent's files, saved in
	// its index and loaded from it at start; guarded by Enforcer.mu.
	removed layout.Removed
}

// doc is the agent's index to save; Enforcer.mu must be held.
func (a *Agent) doc() layout.IndexDoc {
	d := layout.IndexDoc{Version: 1, Files: append([]layout.IndexedFile(nil), a.files...)}
	if a.removed.Files > 0 {
		rem := a.removed
		d.Removed = &rem
	}
	return d
}

func statfsDir(dir string) (size, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	bs := int64(st.Bsize) // int64 on Linux, uint32 on macOS
	return int64(st.Blocks) * bs, int64(st.Bavail) * bs, nil
}

// Options are what an Enforcer needs of the writer of the root it
// keeps within the rules.
type Options struct {
	Dir    string // the output root
	Rotate int64  // the writer's rotation size (0: none): a margin is at most one file
	// Shared: several processes write the root, and the one holding
	// Dir/LockFile deletes (shared.go).
	Shared bool
	Logger *slog.Logger // nil: slog.Default()
	// Errors counts the file operations that failed (the writer's
	// counter of them); nil: the Enforcer keeps its own.
	Errors *atomic.Uint64
	// Open, when not nil, is called before the Enforcer opens a data
	// file to read its packets' times, and the function it returns
	// once the file is closed: the writer's open-file budget counts
	// the descriptor.
	Open func() (done func())
	// IndexCheck and Relist are the pace of the Shared leader (shared.go):
	// how often it looks for saved indexes changed, and lists every
	// agent directory. 0: DefaultIndexCheck, DefaultRelist.
	IndexCheck, Relist time.Duration
}

// New returns an Enforcer of c over the root o.Dir; Run starts it.
// Until Run has looked at the root, the write gate is open.
func New(c Config, o Options) *Enforcer {
	r := &Enforcer{cfg: c.withDefaults(), dir: o.Dir, rotate: o.Rotate, log: o.Logger, errs: o.Errors, open: o.Open,
		statfs: statfsDir, kick: make(chan struct{}, 1), agents: map[string]*Agent{}, held: map[string]int{},
		shared: sharedRetainer{on: o.Shared, check: cmp.Or(o.IndexCheck, DefaultIndexCheck), relist: cmp.Or(o.Relist, DefaultRelist)}}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.errs == nil {
		r.errs = new(atomic.Uint64)
	}
	r.step.Store(1 << 20)
	r.gate = newWriteGate(&r.Counters)
	return r
}

// Agent returns the record of agent name, created at the first call:
// the handle through which the writer of the agent's files tells the
// Enforcer what it does (Note) and waits at the write gate (Admit).
func (r *Enforcer) Agent(name string) *Agent {
	return r.agent(name)
}

// agent is Agent.
func (r *Enforcer) agent(name string) *Agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agentLocked(name)
}

func (r *Enforcer) agentLocked(name string) *Agent {
	a := r.agents[name]
	if a == nil {
		a = &Agent{r: r, name: name}
		r.agents[name] = a
	}
	return a
}

// wrote counts n bytes that reached the agent's open file, whose first
// packet is at first (Unix ns), and wakes the retention goroutine once
// a step of bytes was written. Called on the write path: no lock, no
// allocation.
func (a *Agent) wrote(n, first int64) {
	a.open.Add(n)
	a.r.written.Add(n)
	if first != 0 {
		a.openFirst.Store(first)
	}
	r := a.r
	if r.pending.Add(n) >= r.step.Load() {
		r.pending.Store(0)
		r.wake()
	}
}

// closed records that the agent's open file was closed: kept (under
// its final name, with bytes, modification time and its packets'
// times) or removed.
func (a *Agent) closed(name string, bytes, mod int64, t layout.TimeRange, kept bool) {
	a.open.Store(0)
	a.admitted.Store(0)
	a.openFirst.Store(0)
	if !kept {
		return
	}
	if !t.OK { // no packet: never happens for a kept file, which holds a mark
		t.Min, t.Max = time.Now().UnixNano(), time.Now().UnixNano()
	}
	r := a.r
	r.mu.Lock()
	a.insert(layout.IndexedFile{Name: name, Bytes: bytes, Mod: mod, First: t.Min, Last: t.Max})
	r.mu.Unlock()
}

// insert adds f in order, unless a file of that name is known.
// Enforcer.mu must be held.
func (a *Agent) insert(f layout.IndexedFile) {
	for i := range a.files {
		if a.files[i].Name == f.Name {
			return
		}
	}
	i, _ := slices.BinarySearchFunc(a.files, f, fileOrder)
	a.files = slices.Insert(a.files, i, f)
	a.closedBytes += f.Bytes
	a.dirty = true
}

// remove drops the file called name; Enforcer.mu must be held.
func (a *Agent) remove(name string) {
	for i := range a.files {
		if a.files[i].Name == name {
			a.closedBytes -= a.files[i].Bytes
			a.files = slices.Delete(a.files, i, i+1)
			a.dirty = true
			return
		}
	}
}

// usage is the agent's bytes, closed and open (with what was written
// since the last flush, and other processes' open files in a shared
// root); Enforcer.mu must be held.
func (a *Agent) usage() int64 {
	return a.closedBytes + a.open.Load() + a.admitted.Load() + a.shared.foreign.Load()
}

// watermarks is Watermarks at the Enforcer's rotation size and write
// rate.
func (r *Enforcer) watermarks(limit int64) (hi, lo int64) {
	return Watermarks(limit, r.rotate, r.rate)
}

// mark returns the watermarks of limit and keeps them, with limit, as
// rule's last (Stats).
func (r *Enforcer) mark(rule Rule, limit int64) (hi, lo int64) {
	hi, lo = r.watermarks(limit)
	m := &r.marks[rule]
	m.limit.Store(limit)
	m.hi.Store(hi)
	m.lo.Store(lo)
	return hi, lo
}

// measureRate updates the write rate: the rate since the last
// measurement, or the recent peak decaying over 10 s, whichever is
// higher.
func (r *Enforcer) measureRate(now time.Time) {
	w := r.written.Load()
	dt := now.Sub(r.rateAt).Seconds()
	switch {
	case r.rateAt.IsZero():
	case dt < 0.01:
		return // too short to measure
	default:
		r.rate = max(float64(w-r.rateSum)/dt, r.rate*math.Exp(-dt/10))
	}
	r.rateAt, r.rateSum = now, w
}

// freeLimit returns the most the filesystem of size bytes may hold
// used under the free rule (0: the rule is off).
func (r *Enforcer) freeLimit(size int64) int64 { return freeLimitOf(&r.cfg, size) }

// setStep sets the bytes written between two wake-ups: an eighth of
// the smallest margin (see watermarks), at least minStep.
func (r *Enforcer) setStep(fsSize int64) {
	step := int64(1) << 62
	for _, limit := range []int64{r.cfg.MaxBytes, r.cfg.AgentBytes, r.freeLimit(fsSize)} {
		if limit > 0 {
			hi, lo := r.watermarks(limit)
			step = min(step, 2*(hi-lo)/8)
		}
	}
	r.step.Store(max(step, minStep))
}

// minStep is the least bytes written between two wake-ups (the
// store's smallest rotation size).
const minStep = 4096

// Run enforces the rules until ctx ends: at start it rebuilds the
// index, then it checks every tick and whenever the writers wake it;
// once repaired is closed it adds the files the repair finished. In
// Shared mode it deletes only while it holds the leader's lock
// (shared.go). It saves the index before it returns. Run it once, and
// only when some rule is on (Config.Off).
func (r *Enforcer) Run(ctx context.Context, repaired <-chan struct{}) {
	if r.shared.on {
		r.runShared(ctx)
		return
	}
	if size, _, err := r.statfs(r.dir); err == nil {
		r.mu.Lock()
		r.fsSize = size
		r.mu.Unlock()
		r.setStep(size)
	}
	r.setAllowance()
	r.load(ctx)
	r.loaded.Store(true)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		r.enforce(time.Now())
		r.setAllowance()
		r.saveIndexes(false)
		select {
		case <-ctx.Done():
			r.saveIndexes(true)
			return
		case <-r.kick:
		case <-t.C:
		case <-repaired:
			repaired = nil
			r.load(ctx)
		}
	}
}

// enforce applies every rule that is on, in the order age, agent, size,
// free.
func (r *Enforcer) enforce(now time.Time) {
	r.measureRate(now)
	if now.Sub(r.goneAt) >= goneCheckInterval {
		r.goneAt = now
		r.dropGone()
	}
	c := &r.cfg
	skip := map[string]bool{} // files that could not be deleted in this round
	if c.MaxAge > 0 {
		cutoff := now.Add(-c.MaxAge).UnixNano()
		for {
			a, f, ok := r.pick(nil, false, cutoff, skip)
			if !ok {
				break
			}
			r.delete(a, f, RuleAge, skip) // or skipped from now on: progress either way
		}
	}
	if c.AgentBytes > 0 {
		r.mu.Lock()
		var over []*Agent
		hi, _ := r.mark(RuleAgent, c.AgentBytes)
		for _, a := range r.agents {
			if a.usage() > hi {
				over = append(over, a)
			}
		}
		r.mu.Unlock()
		short := false
		for _, a := range over {
			short = r.shrink(RuleAgent, c.AgentBytes, a, false, func() int64 {
				r.mu.Lock()
				defer r.mu.Unlock()
				return a.usage()
			}, nil, skip) || short
		}
		r.report(RuleAgent, short, "agent files over --retain-agent-size with only the file being written left", 0, c.AgentBytes)
	}
	if c.MaxBytes > 0 {
		short := r.shrink(RuleSize, c.MaxBytes, nil, true, r.rootBytes, nil, skip)
		r.report(RuleSize, short, "the output root is over --retain-size with only each agent's newest file and the open ones left", r.rootBytes(), c.MaxBytes)
	}
	if c.FreePercent > 0 || c.FreeBytes > 0 {
		size, avail, err := r.statfs(r.dir)
		if err != nil {
			r.errs.Add(1)
			r.log.Error("retention: reading the free space", "dir", r.dir, "err", err)
			return
		}
		r.mu.Lock()
		changed := size != r.fsSize
		r.fsSize = size
		r.mu.Unlock()
		if changed {
			r.setStep(size)
		}
		limit := r.freeLimit(size)
		start, deleted := size-avail, int64(0)
		used := func() int64 {
			// The filesystem's count, or what it was less what this round
			// deleted, whichever is lower: others deleting too must not make
			// this root delete more, nor a filesystem that frees
			// asynchronously.
			s, av, err := r.statfs(r.dir)
			if err != nil {
				return start - deleted
			}
			return min(s-av, start-deleted)
		}
		short := r.shrink(RuleFree, limit, nil, true, used, &deleted, skip)
		r.report(RuleFree, short, "the filesystem has less free space than --retain-free with only each agent's newest file and the open ones left",
			used(), limit)
	}
}

// shrink deletes the oldest files (of a, or of every agent when a is
// nil; keeping each agent's newest when floor) while usage is above the
// high watermark of limit, until it is at or below the low one, adding
// the bytes it deleted to *deleted when deleted is not nil (usage may
// read it). It returns true when usage is still above limit and nothing
// more may be deleted. A limit of 0 or less deletes nothing.
func (r *Enforcer) shrink(rule Rule, limit int64, a *Agent, floor bool, usage func() int64, deleted *int64, skip map[string]bool) bool {
	if limit <= 0 {
		return false
	}
	hi, lo := r.mark(rule, limit)
	u := usage()
	if u <= hi {
		return false
	}
	for u > lo {
		pa, f, ok := r.pick(a, floor, 0, skip)
		if !ok {
			return u > limit
		}
		if r.delete(pa, f, rule, skip) {
			if deleted != nil {
				*deleted += f.Bytes
			}
			r.setAllowance()
		}
		u = usage()
	}
	return false
}

// rootBytes is the bytes of every agent's data files, closed and open.
func (r *Enforcer) rootBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, a := range r.agents {
		n += a.usage()
	}
	return n
}

// pick returns the file with the oldest last packet: of only (or of
// every agent when nil), keeping each agent's newest when floor, older
// than before when before is not 0, neither held nor in skip.
func (r *Enforcer) pick(only *Agent, floor bool, before int64, skip map[string]bool) (*Agent, layout.IndexedFile, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *Agent
	var bf layout.IndexedFile
	consider := func(a *Agent) {
		i := oldest(a.files, floor, before, func(name string) bool {
			path := filepath.Join(a.name, name)
			return skip[path] || r.held[filepath.Join(r.dir, path)] > 0
		})
		if i >= 0 && (best == nil || fileOrder(a.files[i], bf) < 0) {
			best, bf = a, a.files[i]
		}
	}
	if only != nil {
		consider(only)
	} else {
		for _, a := range r.agents {
			consider(a)
		}
	}
	return best, bf, best != nil
}

// delete unlinks f of agent a, for rule, logs and counts it: a file
// whose name the Store gives its data files (the index holds no other),
// never through a link. A file
// not yet published (still .part: its state save failed) or that
// cannot be removed stays in the index and is skipped for the rest of
// the round.
func (r *Enforcer) delete(a *Agent, f layout.IndexedFile, rule Rule, skip map[string]bool) bool {
	path := filepath.Join(r.dir, a.name, f.Name)
	rel := filepath.Join(a.name, f.Name)
	err := safefs.RemoveIn(r.dir, rel) // never through a link in place of the agent's directory
	if errors.Is(err, fs.ErrNotExist) {
		if r.missed != nil {
			r.missed(path)
		}
		if _, err := os.Lstat(path + layout.PartSuffix); !errors.Is(err, fs.ErrNotExist) {
			skip[filepath.Join(a.name, f.Name)] = true
			return false
		}
		// Published between the two looks (the index learns of a file
		// just before its .part is renamed): it is there now.
		err = safefs.RemoveIn(r.dir, rel)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		skip[filepath.Join(a.name, f.Name)] = true
		r.errs.Add(1)
		r.log.Error("retention: deleting file", "agent", a.name, "file", path, "rule", rule.String(), "err", err)
		return false
	}
	if ierr := safefs.RemoveIn(r.dir, index.Path(rel)); ierr != nil && !errors.Is(ierr, fs.ErrNotExist) {
		r.errs.Add(1)
		r.log.Error("retention: deleting the index of a deleted file", "agent", a.name, "file", path, "err", ierr)
	}
	if ferr := safefs.RemoveIn(r.dir, flow.Path(rel)); ferr != nil && !errors.Is(ferr, fs.ErrNotExist) {
		r.errs.Add(1)
		r.log.Error("retention: deleting the flow file of a deleted file", "agent", a.name, "file", path, "err", ferr)
	}
	if terr := safefs.RemoveIn(r.dir, index.BinsPath(rel)); terr != nil && !errors.Is(terr, fs.ErrNotExist) {
		r.errs.Add(1)
		r.log.Error("retention: deleting the timeline summary of a deleted file", "agent", a.name, "file", path, "err", terr)
	}
	r.mu.Lock()
	a.remove(f.Name)
	if err == nil {
		a.removed.Add(f)
	}
	r.mu.Unlock()
	if err != nil { // gone already: deleted by someone else
		if safefs.Dir(filepath.Join(r.dir, a.name)) != nil {
			r.forgetAgent(a.name) // its directory too: the rest of its files
			return false
		}
		r.log.Warn("retention: file gone before it was deleted", "agent", a.name, "file", path)
		return false
	}
	r.Counters.Files[rule].Add(1)
	r.Counters.Bytes[rule].Add(uint64(f.Bytes))
	r.log.Info("retention deleted file", "agent", a.name, "file", f.Name, "bytes", f.Bytes,
		"first_packet", time.Unix(0, f.First).UTC(), "last_packet", time.Unix(0, f.Last).UTC(), "rule", rule.String())
	return true
}

// report logs the change when a rule starts or stops being short, and
// again every minute while it stays short.
func (r *Enforcer) report(rule Rule, short bool, what string, usage, limit int64) {
	r.mu.Lock()
	since := r.short[rule]
	switch {
	case short && since.IsZero():
		r.short[rule] = time.Now()
	case short && time.Since(since) >= time.Minute:
		r.short[rule] = time.Now()
		since = time.Time{} // log again
	case !short:
		r.short[rule] = time.Time{}
	}
	r.mu.Unlock()
	switch {
	case short && since.IsZero():
		r.Counters.Short.Add(1)
		r.log.Error("retention cannot free enough: "+what+"; a full disk refuses writes and nothing unwritten is acknowledged",
			"rule", rule.String(), "usage_bytes", usage, "limit_bytes", limit)
	case !short && !since.IsZero():
		r.log.Info("retention is within its limit again", "rule", rule.String())
	}
}

// hold keeps path from being deleted until release is called (as many
// times as hold).
func (r *Enforcer) hold(path string) (release func()) {
	r.mu.Lock()
	r.held[path]++
	r.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			if r.held[path]--; r.held[path] <= 0 {
				delete(r.held, path)
			}
			r.mu.Unlock()
		})
	}
}

// Stats is a snapshot of retention.
type Stats struct {
	RootBytes int64        // the agents' data files, closed and open
	Short     []string     // rules that cannot be met now (their names)
	Agents    []AgentStats // sorted by name
	// Limits are the limits in bytes of the rules that have one and
	// were checked since Open, with their watermarks: deletion starts
	// above High and goes on down to Low. size: the root's bytes;
	// free: the filesystem's used bytes; agent: each agent's bytes.
	Limits []Limit
}

// Limit is a rule's limit and its watermarks, in bytes.
type Limit struct {
	Rule             string
	Limit, High, Low int64
}

// AgentStats is one agent's files as retention sees them.
type AgentStats struct {
	Name   string
	Files  int       // closed files
	Bytes  int64     // closed and open
	Oldest time.Time // the first packet of its oldest file kept (zero: none)
}

// Stats returns what retention sees now. It takes a lock that the
// writers take once per closed file.
func (r *Enforcer) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st Stats
	for rule, since := range r.short {
		if !since.IsZero() {
			st.Short = append(st.Short, Rule(rule).String())
		}
	}
	for rule := range r.marks {
		m := &r.marks[rule]
		if limit := m.limit.Load(); limit > 0 {
			st.Limits = append(st.Limits, Limit{Rule: Rule(rule).String(), Limit: limit, High: m.hi.Load(), Low: m.lo.Load()})
		}
	}
	st.Agents = make([]AgentStats, 0, len(r.agents))
	for _, a := range r.agents {
		ar := AgentStats{Name: a.name, Files: len(a.files), Bytes: a.usage()}
		oldest := a.openFirst.Load()
		for _, f := range a.files {
			if oldest == 0 || f.First < oldest {
				oldest = f.First
			}
		}
		if oldest != 0 {
			ar.Oldest = time.Unix(0, oldest).UTC()
		}
		st.RootBytes += ar.Bytes
		st.Agents = append(st.Agents, ar)
	}
	slices.SortFunc(st.Agents, func(a, b AgentStats) int { return cmp.Compare(a.Name, b.Name) })
	return st
}

// Hold keeps the closed file at path (below the root) from being
// deleted until release is called (as many times as Hold): for a reader
// of the files (a query tool). A file being written (.part) is never
// deleted anyway.
func (r *Enforcer) Hold(path string) (release func()) {
	return r.hold(filepath.Clean(path))
}

// Loaded reports whether the index was rebuilt from the root (Run's
// first Load is done): before, the size rules do not know the root's
// usage.
func (r *Enforcer) Loaded() bool { return r.loaded.Load() }

// Files returns the closed files of agent name as the index holds them
// now, oldest first (by last packet, then name).
func (r *Enforcer) Files(name string) []layout.IndexedFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a := r.agents[name]; a != nil {
		return slices.Clone(a.files)
	}
	return nil
}
