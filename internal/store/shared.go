package store

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Shared mode (Config.Shared): several processes, or several Stores,
// write one output root, each its own agents.
//
// An agent is written by the holder of an exclusive flock(2) on
// Dir/LockDir/<agent>.lock. Store.Writer takes it without waiting (held
// elsewhere: ErrBusy) and keeps it until Store.Release or Store.Close;
// the kernel drops it when the process dies, however it dies. flock
// locks belong to an open file description, so two Stores of one
// process exclude each other as two processes do. Lock files are never
// removed (removing one could let two holders lock two different
// files).
//
// Taking an agent, before Writer returns: its marks are read from its
// own state file, Dir/AgentStateDir/<agent>.json (the same document as
// StateFile, holding only that agent's instances), and raise what this
// Store held in memory for them (another writer may have raised them
// since; none is ever lowered); then its .part files, left by a writer
// that died, are repaired (repairAgent: marks raised and saved, files
// published), synchronously: Writer returns once that is done, and
// while it runs other calls of Writer for the agent get ErrBusy. So
// every batch in a published file of an agent is covered by its state
// file, and every batch in a .part by the repair that its next holder
// runs. The agent's state file is saved whenever exclusive mode would
// save StateFile (before a closed file is published, after a repair,
// at Release and Close) and only by its holder: a Store never writes
// the state file of an agent it does not hold.
//
// Release closes the agent's file (as a goodbye does), publishes it,
// saves the agent's marks and its retention index, and only then
// unlocks. A publish that fails leaves the file .part for the next
// holder's repair. The Writer released fails every later call with
// ErrReleased.
//
// Each holding is logged (Info): "agent locked" once the lock is taken,
// before any file of the agent is touched, and "agent unlocked" after
// the last, just before the lock is given back; so the logged spans of
// one agent, across every Store of a root, never overlap, and every
// write to the agent's files falls inside one of them.
//
// StateFile, when the root has one from exclusive use, is read at Open
// (its marks count) and never written. The reserve (ReserveFile) is one
// file per root that every process keeps and may release, as in
// exclusive mode, without coordination; the open-file budget
// (MaxOpenFiles) counts this process's descriptors only.

// LockDir, below Dir, holds in Shared mode one lock file per agent
// (<agent>.lock); see Config.Shared.
const LockDir = ".pcapsync-locks"

// AgentStateDir, below Dir, holds in Shared mode one state file per
// agent (<agent>.json, the format of StateFile with that agent's
// instances only).
const AgentStateDir = ".pcapsync-state"

// take locks agent name for this Store, loads its marks and repairs its
// unfinished files; it returns the agent's new Writer.
func (s *Store) take(name string) (*Writer, error) {
	dir := filepath.Join(s.dir, LockDir)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("store: agent %q: creating lock directory: %w", name, err)
	}
	path := filepath.Join(dir, name+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("store: agent %q: opening lock: %w", name, err)
	}
	busy, err := safefs.TryLock(f)
	if busy || err != nil {
		f.Close()
		if busy {
			return nil, fmt.Errorf("store: agent %q is held by another process or Store (%s): %w", name, path, ErrBusy)
		}
		return nil, fmt.Errorf("store: agent %q: locking %s: %w", name, path, err)
	}
	s.log.Info("agent locked", "agent", name)
	if err := s.loadAgentState(name); err != nil {
		s.unhold(name)
		s.log.Info("agent unlocked", "agent", name)
		f.Close()
		return nil, err
	}
	s.repairTaken(name)
	s.ret.Agent(name).Note(retention.Event{Kind: retention.Taken})
	w := s.newWriter(name)
	w.lock = f
	return w, nil
}

// loadAgentState reads the state file of agent name, raises the marks
// of its instances to it and notes the agent as held. A missing file is
// an empty state; a damaged one is moved aside and reported, as
// StateFile is.
func (s *Store) loadAgentState(name string) error {
	dir := filepath.Join(s.dir, AgentStateDir)
	path := filepath.Join(dir, name+".json")
	if err := safefs.Dir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: agent %q: %w", name, err) // a link: nothing read, renamed or removed through it
	}
	removeTemps(path+".tmp*", time.Time{}) // the agent is held: no one else writes them
	var es []stateMark
	b, err := readStateFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = nil // an agent no one wrote yet
	case err != nil && !damagedState(err):
		return fmt.Errorf("store: agent %q: reading %s: %w", name, path, err)
	case err == nil:
		es, err = parseState(b, name)
	}
	if err != nil {
		es = nil
		bad := path + ".damaged"
		os.Rename(path, bad) // a link or FIFO is renamed, never followed
		s.log.Error("agent state file damaged; moved aside, taking the agent without duplicate history but for its .part files", "agent", name, "file", bad, "err", err)
	}
	s.instMu.Lock()
	defer s.instMu.Unlock()
	saved := make(map[[16]byte]savedMark, len(es))
	for _, x := range es {
		in := s.instances[x.id]
		if in == nil {
			in = &Instance{id: x.id, name: name, seen: x.seen}
			s.instances[x.id] = in
		}
		if in.name != name {
			s.log.Warn("instance in an agent's state file is known here under another agent name; ignored",
				"agent", name, "instance", hex.EncodeToString(x.id[:]), "known_as", in.name)
			continue
		}
		in.raise(x.seq)
		if x.seen.After(in.seen) {
			in.seen = x.seen
		}
		saved[x.id] = savedMark{x.seq, x.seen}
	}
	s.savedAgent[name] = saved
	s.held[name] = true
	return nil
}

// unhold notes that this Store no longer holds agent name: its state
// file is not written from now on.
func (s *Store) unhold(name string) {
	s.instMu.Lock()
	delete(s.held, name)
	delete(s.savedAgent, name)
	s.instMu.Unlock()
}

// repairTaken repairs the unfinished files of agent name, just taken.
func (s *Store) repairTaken(name string) {
	dir := filepath.Join(s.dir, name)
	removeTemps(filepath.Join(dir, "*"+layout.PartSuffix+".repair"), time.Time{})
	if parts := partFiles(dir); len(parts) > 0 {
		s.repairAgent(context.Background(), repairJob{name: name, parts: parts})
	}
}

// saveAgentStates writes the state file of each agent of names that
// this Store holds (of every agent it holds when names is nil) whose
// marks changed since it was written (see writeRootState).
func (s *Store) saveAgentStates(names []string) error {
	s.instMu.Lock()
	defer s.instMu.Unlock()
	if names == nil {
		for name := range s.held {
			names = append(names, name)
		}
	}
	var errs []error
	for _, name := range names {
		if s.held[name] {
			errs = append(errs, s.writeAgentState(name))
		}
	}
	return errors.Join(errs...)
}

// writeAgentState writes the state file of agent name when its marks
// changed; instMu is held (so two saves of one agent never cross).
func (s *Store) writeAgentState(name string) error {
	now := time.Now()
	old := s.savedAgent[name]
	marks := map[[16]byte]savedMark{}
	same := true
	for id, in := range s.instances {
		seq := in.lastSeq.Load()
		if in.name != name || seq == 0 || now.Sub(in.seen) > stateTTL {
			continue
		}
		marks[id] = savedMark{seq, in.seen}
		if o, ok := old[id]; !ok || o.seq != seq || in.seen.Sub(o.seen) > seenRefresh {
			same = false
		}
	}
	if same && len(marks) == len(old) {
		return nil
	}
	doc := stateDoc{Version: 1, Instances: make([]stateEntry, 0, len(marks))}
	for id, m := range marks {
		doc.Instances = append(doc.Instances, stateEntry{Instance: hex.EncodeToString(id[:]), Name: name, LastSeq: m.seq, Seen: m.seen})
	}
	slices.SortFunc(doc.Instances, func(a, b stateEntry) int { return strings.Compare(a.Instance, b.Instance) })
	b, err := json.MarshalIndent(&doc, "", " ")
	if err != nil {
		return err
	}
	dir := filepath.Join(s.dir, AgentStateDir)
	if err := safefs.EnsureDir(dir); err != nil {
		return fmt.Errorf("saving state of agent %q: %w", name, err)
	}
	if err := s.writeStateFile(dir, filepath.Join(dir, name+".json"), b); err != nil {
		return err
	}
	s.savedAgent[name] = marks
	return nil
}

// holds reports whether this Store holds agent name (Shared mode).
func (s *Store) holds(name string) bool {
	s.instMu.Lock()
	defer s.instMu.Unlock()
	return s.held[name]
}

// sharedRoot is the mode of a root shared by a writer group (see
// rootMode and the comment above).
type sharedRoot struct{ s *Store }

// start: repairs run when an agent is taken (Writer).
func (m sharedRoot) start() error {
	s := m.s
	s.repairing, s.repairDone = map[string]bool{}, make(chan struct{})
	close(s.repairDone)
	return nil
}

// tempAge: another process may be writing a temporary file now; only
// those old enough to be left by a crash go.
func (sharedRoot) tempAge() time.Duration { return staleTemp }

// writer takes the agent (take) with s.mu let go, the agent marked
// moving meanwhile.
func (m sharedRoot) writer(name string) (*Writer, error) {
	s := m.s
	s.moving[name] = true
	s.mu.Unlock()
	w, err := s.take(name)
	s.mu.Lock()
	delete(s.moving, name)
	return w, err
}

// saveMarks saves the state file of agent name.
func (m sharedRoot) saveMarks(name string) error { return m.s.saveAgentStates([]string{name}) }

// saveAll saves the state files of every agent the Store holds.
func (m sharedRoot) saveAll() error { return m.s.saveAgentStates(nil) }

// publish publishes closed part files (see publish) saving the state
// files of their agents only, and leaves the files of an agent released
// meanwhile to its next holder's repair.
func (m sharedRoot) publish(parts []string) error {
	s := m.s
	s.pubMu.RLock()
	defer s.pubMu.RUnlock()
	var names []string
	mine := parts[:0:0]
	for _, p := range parts {
		name := filepath.Base(filepath.Dir(p))
		if !s.holds(name) {
			s.log.Info("closed file of an agent released before it was published: its next holder repairs it", "file", p)
			continue
		}
		mine = append(mine, p)
		if !slices.Contains(names, name) {
			names = append(names, name)
		}
	}
	if len(mine) == 0 {
		return nil
	}
	return publish(func() error { return s.saveAgentStates(names) }, s.cfg.Fsync != FsyncNever, mine)
}

// Release closes agent name's open file, if any, and publishes it (as
// Writer.Close does), and forgets its Writer, which fails every later
// call with ErrReleased; the next Writer call for the agent returns a
// new one. In Shared mode it then saves the agent's marks and its
// retention index and unlocks the agent, also after an error: a file it
// could not publish stays .part, for the next holder's repair.
// Releasing an agent without a Writer does nothing. The caller stops
// writing the agent's batches first.
func (s *Store) Release(name string) error {
	s.mu.Lock()
	w := s.writers[name]
	if w == nil {
		s.mu.Unlock()
		return nil
	}
	delete(s.writers, name)
	s.moving[name] = true // Writer(name) is busy until the lock is given back
	parts := s.mode.releasing(name)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.moving, name)
		s.mu.Unlock()
	}()

	w.mu.Lock()
	part, err := w.file.closeFile(time.Now())
	parts = append(parts, w.file.unpublished...)
	w.file.unpublished = nil
	w.released = true
	w.mu.Unlock()
	if err != nil {
		s.Counters.FileErrors.Add(1)
	}
	if part != "" {
		parts = append(parts, part)
	}
	return s.mode.released(name, w, parts, err)
}

// releasing takes the agent's files whose publish failed: they are
// published with its release, or left to its next holder.
func (m sharedRoot) releasing(name string) []string {
	s := m.s
	var parts []string
	dir := filepath.Join(s.dir, name)
	s.unpublished = slices.DeleteFunc(s.unpublished, func(p string) bool {
		if filepath.Dir(p) == dir {
			parts = append(parts, p)
			return true
		}
		return false
	})
	return parts
}

// released publishes the agent's files saving its state file, then
// gives it back, also after an error: a file it could not publish stays
// .part, for the next holder's repair.
func (m sharedRoot) released(name string, w *Writer, parts []string, err error) error {
	s := m.s
	save := func() error { return s.saveAgentStates([]string{name}) }
	if len(parts) > 0 {
		err = errors.Join(err, publish(save, s.cfg.Fsync != FsyncNever, parts))
	} else {
		err = errors.Join(err, save()) // instances without files, or marks raised by a repair
	}
	if err != nil {
		s.Counters.FileErrors.Add(1)
		s.log.Error("releasing agent: files not published stay .part for its next holder", "agent", name, "err", err)
	}
	s.unlockAgent(w)
	return err
}

// closing gives back every agent: their marks and indexes are saved.
func (m sharedRoot) closing(ws []*Writer) {
	s := m.s
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	for _, w := range ws {
		w.mu.Lock()
		w.released = true
		w.mu.Unlock()
		s.unlockAgent(w)
	}
}

// unlockAgent gives back the lock of w's agent (Shared mode): it saves
// the agent's retention index, waits for a publish of the ticker in
// progress, stops saving the agent's state and unlocks.
func (s *Store) unlockAgent(w *Writer) {
	s.ret.Agent(w.name).Note(retention.Event{Kind: retention.Released})
	s.pubMu.Lock()
	s.unhold(w.name)
	s.pubMu.Unlock()
	if w.lock != nil {
		s.log.Info("agent unlocked", "agent", w.name)
		w.lock.Close() // unlocks
		w.lock = nil
	}
}
