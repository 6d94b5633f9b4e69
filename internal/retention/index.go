package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// indexSaveInterval is the least time between two saves of the index.
const indexSaveInterval = time.Second

// Load adds to the index every closed data file below the agent
// directories that it does not hold yet: with the times the saved index
// gives for its name, size and modification time, else with those a
// scan of the file finds. Run calls it at start and once the repairs
// are done; anything below the root that the writer did not make is
// reported once per Enforcer, however often Load runs.
func (r *Enforcer) Load(ctx context.Context) { r.load(ctx) }

// load is Load.
func (r *Enforcer) load(ctx context.Context) {
	start := time.Now()
	if safefs.Dir(filepath.Join(r.dir, layout.RetainDir)) == nil {
		tmps, _ := filepath.Glob(filepath.Join(r.dir, layout.RetainDir, "*.tmp*")) // left by a crash
		for _, t := range tmps {
			os.Remove(t)
		}
	}
	names, err := r.agentDirs()
	if err != nil {
		return
	}
	var files, scanned int
	var bytes int64
	for _, name := range names {
		n, sc, b := r.loadAgent(ctx, name, time.Time{})
		files, scanned, bytes = files+n, scanned+sc, bytes+b
		r.setAllowance() // the free rule's, while the rest loads
		if ctx.Err() != nil {
			return
		}
	}
	r.dropGone()
	if files > 0 {
		r.log.Info("retention: indexed closed files", "files", files, "bytes", bytes, "scanned", scanned,
			"duration", time.Since(start).Round(time.Millisecond))
	}
}

// agentDirs lists the agent directories of the root: directories (not
// links) with a valid agent name. Anything else there that the Store
// did not make is reported once (foreign) and left alone.
func (r *Enforcer) agentDirs() ([]string, error) {
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		r.errs.Add(1)
		r.log.Error("retention: reading the output root", "dir", r.dir, "err", err)
		return nil, err
	}
	var names []string
	for _, e := range ents {
		switch {
		case e.Type()&fs.ModeSymlink != 0:
			r.foreign(filepath.Join(r.dir, e.Name()), "a symbolic link in the output root: not followed, nothing through it deleted")
		case strings.HasPrefix(e.Name(), ".pcapsync"): // the Store's own
		case e.IsDir() && wire.ValidateName(e.Name()) == nil:
			names = append(names, e.Name())
		default:
			r.foreign(filepath.Join(r.dir, e.Name()), "not an agent directory: left alone")
		}
	}
	return names, nil
}

// maxForeign bounds the paths foreign remembers having reported.
const maxForeign = 1000

// foreign reports, once per path, something below the root that the
// Store did not make (or that is not what it made: a link, a FIFO) and
// leaves alone: retention never deletes it, nor anything through it.
func (r *Enforcer) foreign(path, why string) {
	r.mu.Lock()
	seen := r.reported[path]
	full := !seen && len(r.reported) >= maxForeign
	if !seen && !full {
		if r.reported == nil {
			r.reported = map[string]bool{}
		}
		r.reported[path] = true
	}
	first := full && !r.reportedFull
	r.reportedFull = r.reportedFull || full
	r.mu.Unlock()
	switch {
	case first:
		r.log.Warn("retention: more files the collector did not make are left alone; not reported each", "reported", maxForeign)
	case !seen && !full:
		r.Counters.Foreign.Add(1)
		r.log.Warn("retention: "+why, "path", path)
	}
}

// loadAgent is load for one agent directory; it returns the files it
// added, how many of them it scanned and their bytes. A file the saved
// index does not list (or lists with another size or modification
// time) and that was modified after young (when not zero) is left for a
// later call: its writer is about to list it. Only the agent's data
// files (layout.IsDataFile) are indexed; other files are reported (foreign).
func (r *Enforcer) loadAgent(ctx context.Context, name string, young time.Time) (added, scanned int, bytes int64) {
	adir := filepath.Join(r.dir, name)
	if err := safefs.Dir(adir); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			r.foreign(adir, "an agent directory that is a link or not a directory: not followed, nothing through it deleted")
		}
		r.forgetAgent(name)
		return 0, 0, 0
	}
	savedDoc := r.savedIndex(name)
	saved := savedDoc.Files
	if savedDoc.Removed.Files > 0 {
		a := r.agent(name)
		r.mu.Lock()
		a.removed.Merge(savedDoc.Removed)
		r.mu.Unlock()
	}
	ents, err := os.ReadDir(adir)
	if errors.Is(err, fs.ErrNotExist) {
		r.forgetAgent(name)
		return 0, 0, 0
	}
	if err != nil {
		r.errs.Add(1)
		r.log.Error("retention: reading an agent directory", "agent", name, "err", err)
		return 0, 0, 0
	}
	var a *Agent // made at its first data file: a directory without any is no agent's
	stale := 0
	for _, e := range ents {
		if ctx.Err() != nil {
			break
		}
		if !layout.OwnFile(name, e.Name()) || !e.Type().IsRegular() {
			r.foreign(filepath.Join(adir, e.Name()), "not a file the collector made: left alone")
			continue
		}
		if !layout.IsDataFile(name, e.Name()) {
			continue // a .part, an index, a repair's
		}
		if a == nil {
			a = r.agent(name)
		}
		r.mu.Lock()
		known := false
		for i := range a.files {
			known = known || a.files[i].Name == e.Name()
		}
		r.mu.Unlock()
		info, err := e.Info()
		if known || err != nil {
			continue
		}
		path := filepath.Join(adir, e.Name())
		size, mod := info.Size()+layout.IndexBytes(path), info.ModTime().UnixNano()
		f, ok := saved[e.Name()]
		if ok && (f.Bytes != size || f.Mod != mod) {
			ok = false
			stale++
		}
		if !ok && !young.IsZero() && info.ModTime().After(young) {
			continue
		}
		if !ok {
			f, err = r.scanTimes(ctx, path)
			scanned++
			if err != nil {
				// Unreadable or without a packet: its modification time
				// stands in for its last packet.
				r.log.Warn("retention: no packet time found in file; using its modification time", "agent", name, "file", e.Name(), "err", err)
				f = layout.IndexedFile{Name: e.Name(), First: mod, Last: mod}
			}
			f.Bytes, f.Mod = size, mod
		}
		r.mu.Lock()
		a.insert(f)
		r.mu.Unlock()
		added++
		bytes += f.Bytes
	}
	if stale > 0 {
		r.log.Warn("retention: saved index entries that do not match their files (size or modification time) ignored; the files were read again",
			"agent", name, "files", stale)
	}
	return added, scanned, bytes
}

// savedIndex returns agent name's saved index (layout.RetainDir/<name>.json):
// its entries by file name, checked (layout.ParseIndexDoc), and its
// record of removals; empty when there is none or it cannot be read,
// with a warning when it is not a regular file of at most maxIndexDoc
// bytes or does not parse.
func (r *Enforcer) savedIndex(name string) layout.Index {
	m, err := layout.ReadIndexDoc(r.dir, name)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("retention: saved index ignored; the files are read instead", "agent", name, "err", err)
	}
	return m
}

// scanTimes reads a closed data file for the times of its first and
// last packet.
func (r *Enforcer) scanTimes(ctx context.Context, path string) (layout.IndexedFile, error) {
	if r.open != nil {
		defer r.open()() // its descriptor counts in the writer's open-file budget
	}
	f, err := safefs.Open(path)
	if err != nil {
		return layout.IndexedFile{}, err
	}
	defer f.Close()
	sc, err := layout.Scan(ctx, f, layout.CodecOf(path))
	if err != nil {
		return layout.IndexedFile{}, err
	}
	if !sc.Times.OK {
		return layout.IndexedFile{}, fmt.Errorf("%w in %s", errNoPackets, path)
	}
	return layout.IndexedFile{Name: filepath.Base(path), First: sc.Times.Min, Last: sc.Times.Max}, nil
}

// Save writes the saved index of every agent whose files changed, now:
// the writer calls it when it closes.
func (r *Enforcer) Save() { r.saveIndexes(true) }

// saveIndexes writes the index of every agent whose files changed, at
// most once per indexSaveInterval unless force. A failed write is
// tried again next time.
func (r *Enforcer) saveIndexes(force bool) {
	r.shared.saveMu.Lock()
	defer r.shared.saveMu.Unlock()
	if !force && time.Since(r.saved) < indexSaveInterval {
		return
	}
	r.saved = time.Now()
	type job struct {
		a   *Agent
		doc layout.IndexDoc
	}
	var jobs []job
	r.mu.Lock()
	for _, a := range r.agents {
		if a.dirty && (!r.shared.on || a.shared.held.Load()) { // Shared: only the holder writes an agent's index
			a.dirty = false
			jobs = append(jobs, job{a, a.doc()})
		}
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	dir := filepath.Join(r.dir, layout.RetainDir)
	if err := safefs.EnsureDir(dir); err != nil {
		r.log.Debug("retention: saving the index", "err", err)
		return
	}
	for _, j := range jobs {
		if r.shared.on {
			j.doc = r.mergeDoc(j.a.name, j.doc)
		}
		b, err := json.Marshal(&j.doc)
		if err == nil {
			err = safefs.WriteReplace(filepath.Join(dir, j.a.name+".json"), b, false)
		}
		if err != nil {
			r.log.Debug("retention: saving the index; retrying later", "agent", j.a.name, "err", err)
			r.mu.Lock()
			j.a.dirty = true
			r.mu.Unlock()
		}
	}
}

// goneCheckInterval is the least time between two looks for agent
// directories removed from under the index (dropGone).
const goneCheckInterval = 10 * time.Second

// dropGone forgets the agents whose directory no longer exists (removed
// by hand): those the index lists files of, and those with a saved
// index. One stat per such agent.
func (r *Enforcer) dropGone() {
	names := map[string]bool{}
	r.mu.Lock()
	for name, a := range r.agents {
		if len(a.files) > 0 {
			names[name] = true
		}
	}
	r.mu.Unlock()
	var ents []os.DirEntry
	if safefs.Dir(filepath.Join(r.dir, layout.RetainDir)) == nil {
		ents, _ = os.ReadDir(filepath.Join(r.dir, layout.RetainDir)) // none yet: no saved index
	}
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && wire.ValidateName(name) == nil {
			names[name] = true
		}
	}
	for name := range names {
		if _, err := os.Lstat(filepath.Join(r.dir, name)); errors.Is(err, fs.ErrNotExist) {
			r.forgetAgent(name)
		}
	}
}

// forgetAgent drops from the index the closed files of agent name,
// whose directory is gone, and removes its saved index, with a log line
// when there was anything to drop. The agent's record stays (a Writer
// may hold it) with its open file, if any.
func (r *Enforcer) forgetAgent(name string) {
	var files int
	var bytes int64
	r.mu.Lock()
	if a := r.agents[name]; a != nil {
		files, bytes = len(a.files), a.closedBytes
		a.files, a.closedBytes, a.dirty = nil, 0, false
	}
	r.mu.Unlock()
	err := safefs.RemoveIn(r.dir, filepath.Join(layout.RetainDir, name+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Debug("retention: removing the index of an agent whose directory is gone", "agent", name, "err", err)
	}
	if files > 0 || err == nil {
		r.log.Warn("retention: agent directory gone; dropped its index", "agent", name, "files", files, "bytes", bytes)
	}
}
