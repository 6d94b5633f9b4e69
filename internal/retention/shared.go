package retention

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Retention in Shared mode (Config.Shared): of the processes sharing a
// root, one deletes, the leader: the one holding an exclusive flock on
// Dir/LockFile. Every process tries to take it each tick (250 ms)
// without waiting; the leader keeps it until its Run returns or it
// dies, and then another one takes over within a tick. The others
// delete nothing; they still count what they write (Counters, the
// metrics) and record and index the files they close.
//
// The leader learns of the files other processes close from their
// indexes: an agent's index (Dir/layout.RetainDir/<agent>.json) is written only
// by the holder of the agent, merged with what the file already lists
// (the agent's earlier holders' files) and pruned of files no longer
// there, within a second of a close (indexSaveInterval) and when the
// agent is released. The leader looks at the indexes' modification
// times every Options.IndexCheck and re-reads an agent whose index
// changed (with a listing of its directory); every Options.Relist it
// lists every agent directory. A file no index lists is read for its
// packets' times (as at start in exclusive mode) once it is
// sharedScanGrace old: until then its writer is expected to list it. A
// listing also drops from the leader's index the files gone (deleted by
// a leader before it) and counts the bytes of the .part files of the
// agents the leader does not hold, which the size and agent rules count
// as open files. Deleting a file already gone is not an error. The
// leader never deletes a .part file, nor a file held by a reader
// (Enforcer.Hold; the Store's Hold) of its own process: Hold does not reach across
// processes; a reader in another process that has a file open keeps
// reading it after the unlink.
//
// The write rate that moves the watermarks (see watermarks) is the
// leader's own, not the root's.

// LockFile, below Dir, is the lock of the retention leader in
// Shared mode.
const LockFile = ".pcapsync-retain.lock"

// The leader's pace: the defaults of Options.IndexCheck and
// Options.Relist, and how old a file no index lists must be before the
// leader reads it.
const (
	DefaultIndexCheck = time.Second
	DefaultRelist     = 10 * time.Second
	sharedScanGrace   = 5 * time.Second
)

// sharedRetainer is the Enforcer's Shared-mode state.
type sharedRetainer struct {
	on            bool
	check, relist time.Duration         // Options.IndexCheck, Options.Relist
	saveMu        sync.Mutex            // serialises index saves (saveIndexes, release)
	leader        atomic.Bool           // this process deletes
	stamps        map[string]indexStamp // the leader's: indexes as last read (run's goroutine only)
}

// sharedAgent is a Agent's Shared-mode state.
type sharedAgent struct {
	held    atomic.Bool  // this Store holds the agent: it writes its index
	foreign atomic.Int64 // bytes of the agent's .part files, when not held (the leader's listing)
}

type indexStamp struct {
	mod  time.Time
	size int64
}

// runShared is run in Shared mode: it takes the leader's lock when it
// can and then enforces the rules, until ctx ends; leader or not, it
// saves the indexes of the agents this Store holds.
func (r *Enforcer) runShared(ctx context.Context) {
	lock, err := safefs.OpenFile(filepath.Join(r.dir, LockFile), os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		r.errs.Add(1)
		r.log.Error("retention: opening the leader's lock; this process will not delete", "err", err)
	} else {
		defer lock.Close() // unlocks: another process takes over
	}
	if size, _, err := r.statfs(r.dir); err == nil {
		r.mu.Lock()
		r.fsSize = size
		r.mu.Unlock()
		r.setStep(size)
	}
	var checked, listed time.Time
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		now := time.Now()
		if !r.shared.leader.Load() && lock != nil {
			busy, err := safefs.TryLock(lock)
			switch {
			case err != nil:
				r.errs.Add(1)
				r.log.Error("retention: taking the leader's lock; retrying", "err", err)
			case !busy:
				// Every file is read before the first deletion, young
				// ones too: an index missing the others' oldest files
				// would make the leader delete newer ones first.
				r.log.Info("retention: this process now deletes for the shared root (leader)", "dir", r.dir)
				r.refresh(ctx, true, time.Time{})
				listed, checked = now, now
				r.shared.leader.Store(true)
			}
		}
		if r.shared.leader.Load() {
			young := now.Add(-sharedScanGrace)
			switch {
			case now.Sub(listed) >= r.shared.relist:
				r.refresh(ctx, true, young)
				listed, checked = now, now
			case now.Sub(checked) >= r.shared.check:
				r.refresh(ctx, false, young)
				checked = now
			}
			r.enforce(now)
		}
		r.saveIndexes(false)
		select {
		case <-ctx.Done():
			r.saveIndexes(true)
			r.shared.leader.Store(false)
			return
		case <-r.kick:
		case <-t.C:
		}
	}
}

// refresh brings the leader's index up to date: every agent directory
// when all, else the agents whose saved index changed since the last
// refresh; files no index lists modified after young are left for a
// later refresh (see loadAgent).
func (r *Enforcer) refresh(ctx context.Context, all bool, young time.Time) {
	if r.shared.stamps == nil {
		r.shared.stamps = map[string]indexStamp{}
	}
	var names []string
	var ents []os.DirEntry
	if safefs.Dir(filepath.Join(r.dir, layout.RetainDir)) == nil {
		ents, _ = os.ReadDir(filepath.Join(r.dir, layout.RetainDir)) // none yet: nothing changed
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || wire.ValidateName(name) != nil {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		st := indexStamp{info.ModTime(), info.Size()}
		if r.shared.stamps[name] != st {
			r.shared.stamps[name] = st
			names = append(names, name)
		}
	}
	if all {
		var err error
		if names, err = r.agentDirs(); err != nil {
			return
		}
	}
	for _, name := range names {
		if ctx.Err() != nil {
			return
		}
		r.loadAgent(ctx, name, young)
		r.prune(name)
	}
}

// prune drops from agent name's index the files no longer in its
// directory, and counts the bytes of its .part files when this Store
// does not hold it.
func (r *Enforcer) prune(name string) {
	if safefs.Dir(filepath.Join(r.dir, name)) != nil {
		return // gone, or a link: loadAgent forgot it
	}
	ents, err := os.ReadDir(filepath.Join(r.dir, name))
	if err != nil {
		return
	}
	a := r.agent(name)
	present := make(map[string]bool, len(ents))
	var foreign int64
	for _, e := range ents {
		n, part := strings.CutSuffix(e.Name(), layout.PartSuffix)
		present[n] = true
		if part && layout.OwnFile(name, e.Name()) && !a.shared.held.Load() {
			if info, err := e.Info(); err == nil {
				foreign += info.Size()
			}
		}
	}
	a.shared.foreign.Store(foreign)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; i < len(a.files); {
		if present[a.files[i].Name] {
			i++
			continue
		}
		a.remove(a.files[i].Name) // deleted by an earlier leader
	}
}

// mergeDoc returns the index document to save for agent name in a
// shared root: its files merged (mergeIndex), its record of removals
// merged with the saved one's (layout.Removed.Merge).
func (r *Enforcer) mergeDoc(name string, doc layout.IndexDoc) layout.IndexDoc {
	doc.Files = r.mergeIndex(name, doc.Files)
	saved, _ := layout.ReadIndexDoc(r.dir, name)
	var rem layout.Removed
	if doc.Removed != nil {
		rem = *doc.Removed
	}
	rem.Merge(saved.Removed)
	if rem.Files > 0 {
		doc.Removed = &rem
	}
	return doc
}

// mergeIndex returns the index to save for agent name: files (this
// Store's) and the files its saved index lists, of those still in its
// directory (or, for this Store's, still .part: recorded just before
// their publish), oldest first. It drops from this Store's index the
// files gone (deleted by the leader).
func (r *Enforcer) mergeIndex(name string, files []layout.IndexedFile) []layout.IndexedFile {
	if safefs.Dir(filepath.Join(r.dir, name)) != nil {
		return files
	}
	ents, err := os.ReadDir(filepath.Join(r.dir, name))
	if err != nil {
		return files
	}
	defer r.forget(name, files, ents)
	present := make(map[string]bool, len(ents))
	for _, e := range ents {
		present[e.Name()] = true
	}
	out := make([]layout.IndexedFile, 0, len(files))
	seen := make(map[string]bool, len(files))
	for _, f := range files {
		if present[f.Name] || present[f.Name+layout.PartSuffix] {
			out = append(out, f)
			seen[f.Name] = true
		}
	}
	saved, _ := layout.ReadIndex(r.dir, name) // its valid entries
	for _, f := range saved {
		if !seen[f.Name] && present[f.Name] {
			out = append(out, f)
			seen[f.Name] = true
		}
	}
	slices.SortFunc(out, fileOrder)
	return out
}

// forget drops from agent name's index (without marking it dirty) the
// files of files that are not in ents, its directory.
func (r *Enforcer) forget(name string, files []layout.IndexedFile, ents []os.DirEntry) {
	present := make(map[string]bool, len(ents))
	for _, e := range ents {
		present[strings.TrimSuffix(e.Name(), layout.PartSuffix)] = true
	}
	a := r.agent(name)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range files {
		if !present[f.Name] {
			dirty := a.dirty
			a.remove(f.Name)
			a.dirty = dirty
		}
	}
}

// release saves agent name's index, which this Store stops writing: it
// is giving the agent back.
func (r *Enforcer) release(name string) {
	a := r.agent(name)
	r.shared.saveMu.Lock()
	defer r.shared.saveMu.Unlock()
	r.mu.Lock()
	dirty := a.dirty
	a.dirty = false
	doc := a.doc()
	r.mu.Unlock()
	if dirty {
		doc = r.mergeDoc(name, doc)
		dir := filepath.Join(r.dir, layout.RetainDir)
		b, err := json.Marshal(&doc)
		if err == nil {
			err = safefs.EnsureDir(dir)
		}
		if err == nil {
			err = safefs.WriteReplace(filepath.Join(dir, name+".json"), b, false)
		}
		if err != nil {
			// A cache: the leader reads the files it lacks.
			r.log.Debug("retention: saving the index of an agent released", "agent", name, "err", err)
		}
	}
	a.shared.held.Store(false)
}

// Leader reports whether this Enforcer deletes: always when no rule is
// off and the root is not shared, and in Shared mode while it holds the
// leader's lock.
func (r *Enforcer) Leader() bool {
	return !r.cfg.Off() && (!r.shared.on || r.shared.leader.Load())
}
