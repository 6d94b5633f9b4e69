package store

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
	"golang.org/x/sys/unix"
)

// StateFile holds, below Dir, the high-water sequence number of each
// agent instance with batches in files, saved before closed files are
// published and on shutdown and loaded on start, so a restarted
// collector drops batches it wrote before even when its last
// acknowledgement never reached the agent. Instances that only said
// hello are not kept; the others are forgotten stateTTL after they were
// last seen. A save that would change no mark is skipped. Agent names
// cannot start with '.', so it never collides with an agent directory.
const StateFile = ".pcapsync-state.json"

// stateTTL is how long an instance that was not seen is remembered.
const stateTTL = 7 * 24 * time.Hour

// seenRefresh: a save also rewrites the state file when an instance was
// seen this much later than the file says, so that an agent that keeps
// connecting without sending is not forgotten after stateTTL.
const seenRefresh = 24 * time.Hour

// savedMark is an instance's entry as the state file holds it.
type savedMark struct {
	seq  uint64
	seen time.Time
}

type stateEntry struct {
	Instance string    `json:"instance"`
	Name     string    `json:"name"`
	LastSeq  uint64    `json:"last_seq"`
	Seen     time.Time `json:"seen"`
}

type stateDoc struct {
	Version   int          `json:"version"`
	Instances []stateEntry `json:"instances"`
}

// loadState reads the state file. A missing file is an empty state; a
// damaged one is moved aside (never a crash loop) and reported.
func (c *Store) loadState() error {
	path := filepath.Join(c.dir, StateFile)
	// A crash during saveState (or keepReserve) leaves its temporary
	// file behind. In Shared mode another process may be writing one
	// now: only those old enough to be left by a crash go.
	var older time.Time
	if age := c.mode.tempAge(); age > 0 {
		older = time.Now().Add(-age)
	}
	for _, pat := range []string{path + ".tmp*", filepath.Join(c.dir, ReserveFile) + ".tmp*", filepath.Join(c.dir, probePrefix) + "*"} {
		removeTemps(pat, older)
	}
	b, err := readStateFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil && !damagedState(err):
		return fmt.Errorf("store: reading %s: %w", path, err)
	}
	var marks []stateMark
	if err == nil {
		marks, err = parseState(b, "")
	}
	if err != nil {
		bad := path + ".damaged"
		os.Rename(path, bad) // a link or FIFO is renamed, never followed
		c.log.Error("state file damaged; moved aside, starting without duplicate history", "file", bad, "err", err)
		return nil
	}
	for _, m := range marks {
		in := &Instance{id: m.id, name: m.name, seen: m.seen}
		in.lastSeq.Store(m.seq)
		c.instances[m.id] = in
		c.saved[m.id] = savedMark{m.seq, m.seen}
	}
	return nil
}

// Limits of a state file, which anyone who can write the root can
// write: a larger file, or one with more instances, is damaged.
const (
	maxStateFile      = 64 << 20
	maxStateInstances = 1 << 20
)

// readStateFile reads the state file at path: a regular file (not a
// link, FIFO or device) of at most maxStateFile bytes.
func readStateFile(path string) ([]byte, error) {
	return safefs.ReadFile(path, maxStateFile)
}

// damagedState reports whether a read error of readStateFile means a
// state file to move aside: not a regular file, or too large.
func damagedState(err error) bool {
	return errors.Is(err, safefs.ErrLink) || errors.Is(err, safefs.ErrNotRegular) || errors.Is(err, safefs.ErrTooLarge)
}

// stateMark is one instance's entry of a state file, checked.
type stateMark struct {
	id   [16]byte
	name string
	seq  uint64
	seen time.Time
}

// parseState parses a state file: StateFile when agent is "", else the
// state file of agent (AgentStateDir), whose entries must all be of
// agent. Every entry it returns holds a 16-byte instance id (hex) found
// once in the file and a valid agent name (wire.ValidateName); a
// document that is not version 1, lists more than maxStateInstances
// instances or holds an entry that is not so is an error (the file is
// damaged).
func parseState(b []byte, agent string) ([]stateMark, error) {
	if len(b) > maxStateFile {
		return nil, fmt.Errorf("%d bytes, limit %d", len(b), maxStateFile)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	switch {
	case doc.Version != 1:
		return nil, fmt.Errorf("version %d, want 1", doc.Version)
	case len(doc.Instances) > maxStateInstances:
		return nil, fmt.Errorf("%d instances, limit %d", len(doc.Instances), maxStateInstances)
	}
	out := make([]stateMark, 0, len(doc.Instances))
	seen := make(map[[16]byte]bool, len(doc.Instances))
	for _, e := range doc.Instances {
		var id [16]byte
		if len(e.Instance) != 32 {
			return nil, fmt.Errorf("instance %q is not 16 bytes of hex", e.Instance)
		}
		if _, err := hex.Decode(id[:], []byte(e.Instance)); err != nil {
			return nil, fmt.Errorf("instance %q: %w", e.Instance, err)
		}
		switch {
		case seen[id]:
			return nil, fmt.Errorf("instance %s listed twice", e.Instance)
		case wire.ValidateName(e.Name) != nil:
			return nil, fmt.Errorf("instance %s: agent name %q invalid", e.Instance, e.Name)
		case agent != "" && e.Name != agent:
			return nil, fmt.Errorf("instance %s of agent %q in the state file of %q", e.Instance, e.Name, agent)
		}
		seen[id] = true
		out = append(out, stateMark{id, e.Name, e.LastSeq, e.Seen})
	}
	return out, nil
}

// stateSaver makes saveState a group commit: a save covers every request
// made before it started, so many sessions ending at once (3000 agents
// saying goodbye) share a few writes instead of one each.
type stateSaver struct {
	mu                 sync.Mutex
	cond               *sync.Cond
	requested, covered uint64
	saving             bool
	err                error
}

// saveState returns once the state file holds every high-water mark as
// of the call: it joins a save that starts after the call, or runs one.
// It may be called with an agent's mu held (it takes only leaf locks).
func (c *Store) saveState() error {
	s := &c.saver
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cond == nil {
		s.cond = sync.NewCond(&s.mu)
	}
	s.requested++
	mine := s.requested
	for s.covered < mine {
		if s.saving {
			s.cond.Wait()
			continue
		}
		s.saving = true
		upto := s.requested
		s.mu.Unlock()
		err := c.mode.saveAll()
		s.mu.Lock()
		s.saving, s.covered, s.err = false, upto, err
		s.cond.Broadcast()
	}
	return s.err
}

// writeRootState writes the state file atomically (temporary file, fsync,
// rename) with every instance that has batches in files (a mark above
// 0), forgetting those not seen for stateTTL. It writes nothing when
// the file already holds the same marks (see seenRefresh).
func (c *Store) writeRootState() error {
	c.instMu.Lock()
	defer c.instMu.Unlock()
	now := time.Now()
	marks := make(map[[16]byte]savedMark, len(c.saved))
	same := true
	for id, in := range c.instances {
		seq := in.lastSeq.Load()
		if seq == 0 || now.Sub(in.seen) > stateTTL {
			continue
		}
		marks[id] = savedMark{seq, in.seen}
		if old, ok := c.saved[id]; !ok || old.seq != seq || in.seen.Sub(old.seen) > seenRefresh {
			same = false
		}
	}
	if same && len(marks) == len(c.saved) {
		return nil
	}
	doc := stateDoc{Version: 1, Instances: make([]stateEntry, 0, len(marks))}
	for id, m := range marks {
		doc.Instances = append(doc.Instances, stateEntry{Instance: hex.EncodeToString(id[:]), Name: c.instances[id].name, LastSeq: m.seq, Seen: m.seen})
	}
	slices.SortFunc(doc.Instances, func(a, b stateEntry) int { return strings.Compare(a.Instance, b.Instance) })
	b, err := json.MarshalIndent(&doc, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.dir, 0o750); err != nil {
		return err
	}
	if err := c.writeStateFile(c.dir, filepath.Join(c.dir, StateFile), b); err != nil {
		return err
	}
	c.saved = marks
	return nil
}

// writeStateFile writes a state file atomically; on a full disk it
// releases the reserve and tries again. After a save it (re)creates the
// reserve.
func (c *Store) writeStateFile(dir, path string, b []byte) error {
	err := safefs.WriteReplace(path, b, true)
	if errors.Is(err, syscall.ENOSPC) && os.Remove(filepath.Join(c.dir, ReserveFile)) == nil {
		// A full disk: the reserve makes room for the state, so that
		// closed files can still be published and the marks kept.
		c.log.Warn("disk full: released the reserve to save the state file", "reserve", filepath.Join(c.dir, ReserveFile))
		err = safefs.WriteReplace(path, b, true)
	}
	if err != nil {
		return fmt.Errorf("saving state to %s: %w", path, err)
	}
	keepReserve(c.dir, len(b))
	return nil
}

// staleTemp: in Shared mode, a temporary file this old was left by a
// crash, not being written by another process.
const staleTemp = time.Minute

// removeTemps removes the files matching pat, of those modified before
// older when it is not zero.
func removeTemps(pat string, older time.Time) {
	tmps, _ := filepath.Glob(pat) // the patterns are valid
	for _, t := range tmps {
		if !older.IsZero() {
			if st, err := os.Stat(t); err != nil || st.ModTime().After(older) {
				continue
			}
		}
		os.Remove(t)
	}
}

// minFree is the free space the output root must have at start: the
// reserve and 1 MiB for the first files and the repairs (which cut files
// in place and need no more). Below it the disk counts as full.
const minFree = minReserve + 1<<20

// checkRoot makes sure the output root dir exists, is a directory the
// collector can create files in, and is on a disk that is not already
// full (see minFree). The error names dir and the reason.
func checkRoot(dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) && deniedHere(err) {
			u, g := processOwner()
			return fmt.Errorf("store: %w: output directory %s does not exist and cannot be created (%w); make it for the user this process runs as: install -d -o %s -g %s -m 0750 %s%s",
				ErrRootUnusable, dir, err, u, g, dir, readOnlyHint(err, dir))
		}
		return fmt.Errorf("store: output directory %s cannot be created: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, probePrefix+"*")
	if err != nil {
		if !deniedHere(err) {
			return fmt.Errorf("store: output directory %s is not writable: %w", dir, err)
		}
		hint := readOnlyHint(err, dir)
		if errors.Is(err, fs.ErrPermission) {
			u, g := processOwner()
			hint = fmt.Sprintf("; give it to the user this process runs as: chown %s:%s %s", u, g, dir)
		}
		return fmt.Errorf("store: %w: output directory %s is not writable (%w)%s", ErrRootUnusable, dir, err, hint)
	}
	err = errors.Join(probe.Close(), os.Remove(probe.Name()))
	if err != nil {
		return fmt.Errorf("store: output directory %s is not writable: %w", dir, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("store: output directory %s: checking free space: %w", dir, err)
	}
	if free := int64(st.Bavail) * int64(st.Bsize); free < minFree {
		return fmt.Errorf("store: output directory %s: disk full: %d bytes free, at least %d needed to start", dir, free, int64(minFree))
	}
	return nil
}

// probePrefix names the file checkRoot creates and removes at once.
const probePrefix = ".pcapsync-probe"

// ReserveFile, below Dir, is space held back for the state file: when a
// full disk keeps the state from being saved, the collector deletes it
// and saves again, and recreates it after a later save finds room. It
// holds zeros, at least 64 KiB and twice the state file.
const ReserveFile = ".pcapsync-reserve"

const minReserve = 64 << 10

// keepReserve (re)creates the reserve when it is missing or smaller
// than twice a state file of stateLen bytes, best effort: on a disk
// still too full it stays missing, to be tried after the next save.
func keepReserve(dir string, stateLen int) {
	path := filepath.Join(dir, ReserveFile)
	want := int64(max(minReserve, 2*stateLen))
	if st, err := os.Stat(path); err == nil && st.Size() >= want {
		return
	}
	if err := safefs.WriteReplace(path, make([]byte, want), true); err != nil {
		os.Remove(path)
	}
}

// deniedHere reports whether err, making or writing in the root,
// says that this process may not (permissions, a read-only file
// system): what only someone putting the directory right fixes, unlike
// a full disk.
func deniedHere(err error) bool {
	return errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)
}

// readOnlyHint is what an error making or writing the root dir adds
// when the file system is read-only: systemd's ProtectSystem=strict
// leaves writable only what a unit lists.
func readOnlyHint(err error, dir string) string {
	if !errors.Is(err, syscall.EROFS) {
		return ""
	}
	return "; a systemd unit also needs ReadWritePaths=" + dir + " (docs/systemd.md)"
}

// processOwner returns the names of the process's effective user and
// group, or their numbers where they have none.
func processOwner() (usr, grp string) {
	usr, grp = strconv.Itoa(os.Geteuid()), strconv.Itoa(os.Getegid())
	if u, err := user.LookupId(usr); err == nil {
		usr = u.Username
	}
	if g, err := user.LookupGroupId(grp); err == nil {
		grp = g.Name
	}
	return usr, grp
}
