package store

import (
	"cmp"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Retention deletes closed data files, oldest first by the time of
// their last packet, to keep the rules of RetainConfig:
//
//   - age: files whose last packet is older than MaxAge go;
//   - agent: an agent's files (closed and open) above AgentBytes: its
//     own oldest go;
//   - size: the root's data files above MaxBytes: the oldest of all
//     agents go;
//   - free: less than FreePercent or FreeBytes of the filesystem free
//     (statfs: every program's use counts): the oldest of all agents go.
//
// Only closed files are deleted, never the one being written (.part),
// never a file held by a reader (Store.Hold). The size and free rules
// keep the newest closed file of every agent, so one busy agent, or
// another root or program on the same filesystem, can never take an
// agent's whole history. Each size rule has a high and a low
// watermark below its limit: deletion starts above the high one and
// goes on to the low one, so it begins before the limit is reached and
// usage stays below it at full ingest as long as deleting keeps up;
// the margin is a tenth of the limit or one rotation file, whichever
// is smaller. Deletion runs on its own goroutine (started by
// Store.Run), woken every tick and whenever the writers have written a
// step of bytes (an atomic add and a non-blocking send on the write
// path; a write never waits for an unlink). Only when deletion falls
// behind by more than the watermarks allow does a write wait, at the
// write gate (retaingate.go), until usage is back under the limit.
//
// The index of closed files (agent, name, bytes, first and last packet)
// is kept in memory, recorded when the Store closes a file, and saved
// per agent below Dir/layout.RetainDir (without fsync: it is a cache). At
// start it is rebuilt from the agent directories: a file the saved
// index lists with the same size and modification time keeps its
// times, any other is read (layout.Scan) for its first and last packet.
// Only the data files the Store names (layout.IsDataFile) are indexed and
// deleted, in agent directories that are not links; anything else
// below the root is left alone and logged once (foreign). An agent whose directory is
// gone (removed by hand) is dropped from the index, with its saved
// index, at start, every goneCheckInterval and when a deletion finds
// one of its files gone (dropGone, forgetAgent).
type retainer struct {
	cfg    RetainConfig
	dir    string
	rotate int64
	log    *slog.Logger
	errs   *atomic.Uint64 // Counters.FileErrors
	statfs func(dir string) (size, avail int64, err error)
	budget *fileBudget // the open-file budget, which a scan's descriptor counts in; nil for none

	// missed, when not nil, is called by delete after an unlink found
	// no file and before it looks for the file's .part (tests: a
	// publish in between).
	missed func(path string)

	// Counters may be read at any time.
	Counters RetainCounters
	// marks are each rule's limit and watermarks as enforce last
	// computed them (the high one moves with the write rate); zero
	// until then.
	marks [NumRules]struct{ limit, hi, lo atomic.Int64 }

	kick    chan struct{} // capacity 1: wakes run
	gate    *writeGate    // holds writers back when deletion falls behind (retaingate.go)
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

	mu sync.Mutex // a leaf lock: guards agents, held, the retAgent fields it names, short, fsSize, reported
	// reported: the paths foreign reported; reportedFull: it stopped
	// reporting at maxForeign of them.
	reported     map[string]bool
	reportedFull bool
	agents       map[string]*retAgent
	held         map[string]int // paths held by readers
	short        [NumRules]time.Time
	fsSize       int64
	saved        time.Time // when dirty indexes were last saved (guarded by shared.saveMu)

	shared sharedRetainer // Shared mode (retainshared.go)
}

// retAgent is one agent's files as retention sees them.
type retAgent struct {
	r    *retainer
	name string

	open      atomic.Int64 // bytes of the open file, as of its last flush
	admitted  atomic.Int64 // bytes let through the write gate since then: written, or about to be, not yet flushed
	buffered  atomic.Int64 // bytes in the file's write buffer after the last batch: not yet on the filesystem
	openFirst atomic.Int64 // first packet of the open file (Unix ns); 0: none
	shared    sharedAgent  // Shared mode (retainshared.go)

	files       []layout.IndexedFile // closed files, oldest first (by last, then name); guarded by retainer.mu
	closedBytes int64                // their bytes; guarded by retainer.mu
	dirty       bool                 // files changed since the index was saved; guarded by retainer.mu
}

func fileOrder(a, b layout.IndexedFile) int {
	return cmp.Or(cmp.Compare(a.Last, b.Last), cmp.Compare(a.Name, b.Name))
}

func statfsDir(dir string) (size, avail int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	bs := int64(st.Bsize) // int64 on Linux, uint32 on macOS
	return int64(st.Blocks) * bs, int64(st.Bavail) * bs, nil
}

func newRetainer(c Config, dir string, errs *atomic.Uint64) *retainer {
	r := &retainer{cfg: c.Retain.withDefaults(), dir: dir, rotate: c.RotateSize, log: c.Logger, errs: errs,
		statfs: statfsDir, kick: make(chan struct{}, 1), agents: map[string]*retAgent{}, held: map[string]int{},
		shared: sharedRetainer{on: c.Shared}}
	r.step.Store(1 << 20)
	r.gate = newWriteGate(&r.Counters)
	return r
}

// agent returns the record of agent name, created at the first call.
func (r *retainer) agent(name string) *retAgent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.agentLocked(name)
}

func (r *retainer) agentLocked(name string) *retAgent {
	a := r.agents[name]
	if a == nil {
		a = &retAgent{r: r, name: name}
		r.agents[name] = a
	}
	return a
}

// wrote counts n bytes that reached the agent's open file, whose first
// packet is at first (Unix ns), and wakes the retention goroutine once
// a step of bytes was written. Called on the write path: no lock, no
// allocation.
func (a *retAgent) wrote(n, first int64) {
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
func (a *retAgent) closed(name string, bytes, mod int64, t layout.TimeRange, kept bool) {
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
// retainer.mu must be held.
func (a *retAgent) insert(f layout.IndexedFile) {
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

// remove drops the file called name; retainer.mu must be held.
func (a *retAgent) remove(name string) {
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
// root); retainer.mu must be held.
func (a *retAgent) usage() int64 {
	return a.closedBytes + a.open.Load() + a.admitted.Load() + a.shared.foreign.Load()
}

// watermarks returns where deletion for a limit starts (hi) and where
// it stops (lo). The margin is a tenth of the limit or one rotation
// file, whichever is smaller; hi is below the limit by half the margin
// or by what the writers write in deleteLead at their recent peak rate
// (at most a quarter of the limit), whichever is more, and lo is half
// the margin below hi.
func (r *retainer) watermarks(limit int64) (hi, lo int64) {
	m := limit / 10
	if r.rotate > 0 {
		m = min(m, r.rotate)
	}
	lead := min(int64(r.rate*deleteLead.Seconds()), limit/4)
	hi = limit - max(m/2, lead)
	return hi, hi - m/2
}

// mark returns the watermarks of limit and keeps them, with limit, as
// rule's last (RetainStats).
func (r *retainer) mark(rule RetainRule, limit int64) (hi, lo int64) {
	hi, lo = r.watermarks(limit)
	m := &r.marks[rule]
	m.limit.Store(limit)
	m.hi.Store(hi)
	m.lo.Store(lo)
	return hi, lo
}

// deleteLead is how long deleting may lag behind writing: at a high
// write rate deletion starts that much earlier. A deletion on a busy
// machine waits for a CPU after its unlink; tens of milliseconds are
// seen with every core busy writing.
const deleteLead = 100 * time.Millisecond

// measureRate updates the write rate: the rate since the last
// measurement, or the recent peak decaying over 10 s, whichever is
// higher.
func (r *retainer) measureRate(now time.Time) {
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
func (r *retainer) freeLimit(size int64) int64 {
	switch {
	case r.cfg.FreeBytes > 0:
		return max(size-r.cfg.FreeBytes, 0)
	case r.cfg.FreePercent > 0:
		return int64(float64(size) * (100 - r.cfg.FreePercent) / 100)
	}
	return 0
}

// setStep sets the bytes written between two wake-ups: an eighth of
// the smallest margin (see watermarks), at least MinRotateSize.
func (r *retainer) setStep(fsSize int64) {
	step := int64(1) << 62
	for _, limit := range []int64{r.cfg.MaxBytes, r.cfg.AgentBytes, r.freeLimit(fsSize)} {
		if limit > 0 {
			hi, lo := r.watermarks(limit)
			step = min(step, 2*(hi-lo)/8)
		}
	}
	r.step.Store(max(step, MinRotateSize))
}

// run enforces the rules until ctx ends: at start it rebuilds the
// index, then it checks every tick and whenever the writers wake it;
// once repaired is closed it adds the files the repair finished.
func (r *retainer) run(ctx context.Context, repaired <-chan struct{}) {
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
func (r *retainer) enforce(now time.Time) {
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
		var over []*retAgent
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
func (r *retainer) shrink(rule RetainRule, limit int64, a *retAgent, floor bool, usage func() int64, deleted *int64, skip map[string]bool) bool {
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
func (r *retainer) rootBytes() int64 {
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
func (r *retainer) pick(only *retAgent, floor bool, before int64, skip map[string]bool) (*retAgent, layout.IndexedFile, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var best *retAgent
	var bf layout.IndexedFile
	consider := func(a *retAgent) {
		n := len(a.files)
		if floor {
			n--
		}
		for i := 0; i < n; i++ {
			f := a.files[i]
			if before != 0 && f.Last >= before {
				return
			}
			path := filepath.Join(a.name, f.Name)
			if skip[path] || r.held[filepath.Join(r.dir, path)] > 0 {
				continue
			}
			if best == nil || fileOrder(f, bf) < 0 {
				best, bf = a, f
			}
			return
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
func (r *retainer) delete(a *retAgent, f layout.IndexedFile, rule RetainRule, skip map[string]bool) bool {
	path := filepath.Join(r.dir, a.name, f.Name)
	rel := filepath.Join(a.name, f.Name)
	err := safefs.RemoveIn(r.dir, rel) // never through a link in place of the agent's directory
	if errors.Is(err, fs.ErrNotExist) {
		if r.missed != nil {
			r.missed(path)
		}
		if exists(path + layout.PartSuffix) {
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
	r.mu.Lock()
	a.remove(f.Name)
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
func (r *retainer) report(rule RetainRule, short bool, what string, usage, limit int64) {
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
func (r *retainer) hold(path string) (release func()) {
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

// RetainStats is a snapshot of retention.
type RetainStats struct {
	RootBytes int64            // the agents' data files, closed and open
	Short     []string         // rules that cannot be met now (their names)
	Agents    []AgentRetention // sorted by name
	// Limits are the limits in bytes of the rules that have one and
	// were checked since Open, with their watermarks: deletion starts
	// above High and goes on down to Low. size: the root's bytes;
	// free: the filesystem's used bytes; agent: each agent's bytes.
	Limits []RetainLimit
}

// RetainLimit is a rule's limit and its watermarks, in bytes.
type RetainLimit struct {
	Rule             string
	Limit, High, Low int64
}

// AgentRetention is one agent's files as retention sees them.
type AgentRetention struct {
	Name   string
	Files  int       // closed files
	Bytes  int64     // closed and open
	Oldest time.Time // the first packet of its oldest file kept (zero: none)
}

// Retention returns retention's totals since Open.
func (s *Store) Retention() *RetainCounters { return &s.ret.Counters }

// RetainStats returns what retention sees now. It takes a lock that
// the writers take once per closed file.
func (s *Store) RetainStats() RetainStats {
	r := s.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	var st RetainStats
	for rule, since := range r.short {
		if !since.IsZero() {
			st.Short = append(st.Short, RetainRule(rule).String())
		}
	}
	for rule := range r.marks {
		m := &r.marks[rule]
		if limit := m.limit.Load(); limit > 0 {
			st.Limits = append(st.Limits, RetainLimit{Rule: RetainRule(rule).String(), Limit: limit, High: m.hi.Load(), Low: m.lo.Load()})
		}
	}
	st.Agents = make([]AgentRetention, 0, len(r.agents))
	for _, a := range r.agents {
		ar := AgentRetention{Name: a.name, Files: len(a.files), Bytes: a.usage()}
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
	slices.SortFunc(st.Agents, func(a, b AgentRetention) int { return cmp.Compare(a.Name, b.Name) })
	return st
}

// Hold keeps the closed file at path (below Dir) from being deleted by
// retention until release is called: for a reader of the files (a query
// tool). A file being written (.part) is never deleted anyway.
func (s *Store) Hold(path string) (release func()) {
	return s.ret.hold(filepath.Clean(path))
}
