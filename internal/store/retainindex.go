package store

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

	"github.com/pcapsync/pcapsync/internal/wire"
)

// RetainDir, below Dir, holds retention's index of closed files, one
// file per agent (<agent>.json: name, bytes, first and last packet of
// each). It is a cache, written without fsync: a file it lacks, or
// lists with another size, is read at start for its packets' times.
// Agent names cannot start with '.', so it never collides with an
// agent directory.
const RetainDir = ".pcapsync-retain"

// indexSaveInterval is the least time between two saves of the index.
const indexSaveInterval = time.Second

type indexDoc struct {
	Version int       `json:"version"`
	Files   []retFile `json:"files"`
}

// tsRange is the earliest and latest of a set of packet timestamps
// (Unix ns).
type tsRange struct {
	min, max int64
	ok       bool
}

func (t *tsRange) add(ts int64) {
	if !t.ok {
		t.min, t.max, t.ok = ts, ts, true
		return
	}
	t.min = min(t.min, ts)
	t.max = max(t.max, ts)
}

// isDataFile reports whether name is a closed data file of the Store.
func isDataFile(name string) bool {
	return !strings.HasPrefix(name, ".") &&
		(strings.HasSuffix(name, ".pcapng") || strings.HasSuffix(name, ".pcapng.gz") || strings.HasSuffix(name, ".pcapng.zst"))
}

// load adds to the index every closed data file below the agent
// directories that it does not hold yet: with the times the saved index
// gives for its name and size, else with those a scan of the file finds.
func (r *retainer) load(ctx context.Context) {
	start := time.Now()
	tmps, _ := filepath.Glob(filepath.Join(r.dir, RetainDir, "*.tmp*")) // left by a crash
	for _, t := range tmps {
		os.Remove(t)
	}
	ents, err := os.ReadDir(r.dir)
	if err != nil {
		r.errs.Add(1)
		r.log.Error("retention: reading the output root", "dir", r.dir, "err", err)
		return
	}
	var files, scanned int
	var bytes int64
	for _, e := range ents {
		if !e.IsDir() || wire.ValidateName(e.Name()) != nil {
			continue
		}
		n, sc, b := r.loadAgent(ctx, e.Name(), time.Time{})
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

// loadAgent is load for one agent directory; it returns the files it
// added, how many of them it scanned and their bytes. A file the saved
// index does not list and that was modified after young (when not zero)
// is left for a later call: its writer is about to list it.
func (r *retainer) loadAgent(ctx context.Context, name string, young time.Time) (added, scanned int, bytes int64) {
	saved := map[string]retFile{}
	if b, err := os.ReadFile(filepath.Join(r.dir, RetainDir, name+".json")); err == nil {
		var doc indexDoc
		if json.Unmarshal(b, &doc) == nil && doc.Version == 1 {
			for _, f := range doc.Files {
				saved[f.Name] = f
			}
		}
	}
	ents, err := os.ReadDir(filepath.Join(r.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		r.forgetAgent(name)
		return 0, 0, 0
	}
	if err != nil {
		r.errs.Add(1)
		r.log.Error("retention: reading an agent directory", "agent", name, "err", err)
		return 0, 0, 0
	}
	a := r.agent(name)
	for _, e := range ents {
		if !e.Type().IsRegular() || !isDataFile(e.Name()) || ctx.Err() != nil {
			continue
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
		f, ok := saved[e.Name()]
		if !ok && !young.IsZero() && info.ModTime().After(young) {
			continue
		}
		size := info.Size() + indexBytes(filepath.Join(r.dir, name, e.Name()))
		if !ok || f.Bytes != size {
			r.budget.acquire(nil, time.Now()) // its descriptor counts in the open-file budget
			f, err = scanTimes(ctx, filepath.Join(r.dir, name, e.Name()))
			r.budget.release(nil)
			scanned++
			if err != nil {
				// Unreadable or without a packet: its modification time
				// stands in for its last packet.
				r.log.Warn("retention: no packet time found in file; using its modification time", "agent", name, "file", e.Name(), "err", err)
				mt := info.ModTime().UnixNano()
				f = retFile{Name: e.Name(), First: mt, Last: mt}
			}
			f.Bytes = size
		}
		r.mu.Lock()
		a.insert(f)
		r.mu.Unlock()
		added++
		bytes += f.Bytes
	}
	return added, scanned, bytes
}

// scanTimes reads a closed data file for the times of its first and
// last packet.
func scanTimes(ctx context.Context, path string) (retFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return retFile{}, err
	}
	defer f.Close()
	sc, err := scanPart(ctx, f, codecOf(path))
	if err != nil {
		return retFile{}, err
	}
	if !sc.times.ok {
		return retFile{}, fmt.Errorf("no packet block in %s", path)
	}
	return retFile{Name: filepath.Base(path), First: sc.times.min, Last: sc.times.max}, nil
}

// saveIndexes writes the index of every agent whose files changed, at
// most once per indexSaveInterval unless force. A failed write is
// tried again next time.
func (r *retainer) saveIndexes(force bool) {
	r.shared.saveMu.Lock()
	defer r.shared.saveMu.Unlock()
	if !force && time.Since(r.saved) < indexSaveInterval {
		return
	}
	r.saved = time.Now()
	type job struct {
		a   *retAgent
		doc indexDoc
	}
	var jobs []job
	r.mu.Lock()
	for _, a := range r.agents {
		if a.dirty && (!r.shared.on || a.shared.held.Load()) { // Shared: only the holder writes an agent's index
			a.dirty = false
			jobs = append(jobs, job{a, indexDoc{Version: 1, Files: append([]retFile(nil), a.files...)}})
		}
	}
	r.mu.Unlock()
	if len(jobs) == 0 {
		return
	}
	dir := filepath.Join(r.dir, RetainDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		r.log.Debug("retention: saving the index", "err", err)
		return
	}
	for _, j := range jobs {
		if r.shared.on {
			j.doc.Files = r.mergeIndex(j.a.name, j.doc.Files)
		}
		b, err := json.Marshal(&j.doc)
		if err == nil {
			err = writeFileNoSync(dir, filepath.Join(dir, j.a.name+".json"), b)
		}
		if err != nil {
			r.log.Debug("retention: saving the index; retrying later", "agent", j.a.name, "err", err)
			r.mu.Lock()
			j.a.dirty = true
			r.mu.Unlock()
		}
	}
}

// writeFileNoSync writes b to path through a temporary file in dir,
// renamed over path, without a sync.
func writeFileNoSync(dir, path string, b []byte) error {
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// goneCheckInterval is the least time between two looks for agent
// directories removed from under the index (dropGone).
const goneCheckInterval = 10 * time.Second

// dropGone forgets the agents whose directory no longer exists (removed
// by hand): those the index lists files of, and those with a saved
// index. One stat per such agent.
func (r *retainer) dropGone() {
	names := map[string]bool{}
	r.mu.Lock()
	for name, a := range r.agents {
		if len(a.files) > 0 {
			names[name] = true
		}
	}
	r.mu.Unlock()
	ents, _ := os.ReadDir(filepath.Join(r.dir, RetainDir)) // none yet: no saved index
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && wire.ValidateName(name) == nil {
			names[name] = true
		}
	}
	for name := range names {
		if _, err := os.Stat(filepath.Join(r.dir, name)); errors.Is(err, fs.ErrNotExist) {
			r.forgetAgent(name)
		}
	}
}

// forgetAgent drops from the index the closed files of agent name,
// whose directory is gone, and removes its saved index, with a log line
// when there was anything to drop. The agent's record stays (a Writer
// may hold it) with its open file, if any.
func (r *retainer) forgetAgent(name string) {
	var files int
	var bytes int64
	r.mu.Lock()
	if a := r.agents[name]; a != nil {
		files, bytes = len(a.files), a.closedBytes
		a.files, a.closedBytes, a.dirty = nil, 0, false
	}
	r.mu.Unlock()
	err := os.Remove(filepath.Join(r.dir, RetainDir, name+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Debug("retention: removing the index of an agent whose directory is gone", "agent", name, "err", err)
	}
	if files > 0 || err == nil {
		r.log.Warn("retention: agent directory gone; dropped its index", "agent", name, "files", files, "bytes", bytes)
	}
}
