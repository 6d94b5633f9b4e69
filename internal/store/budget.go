package store

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// The file budget (Config.MaxOpenFiles) bounds the agent files holding
// a descriptor at once. An agent whose file must be opened while the
// budget is spent takes the descriptor of another agent's file, which is
// parked: its buffered batches are written out and its compressed
// stream made complete on disk (a gzip member is ended; a zstd frame
// gets an empty last block), and its descriptor closed. The file keeps
// layout.PartSuffix, its marks and everything the Store knows of it; when its
// agent writes again it is reopened for append (the zstd terminator is
// cut off first, so the file stays one frame, which Wireshark 4.0
// needs). Rotation, idle close, shutdown and crash repair treat a
// parked file as an open one: one that must be closed is reopened
// first, and one a crash leaves is repaired as any .part file.
//
// Which file is parked: the least recently written, if it was not
// written for staleAfter (a connection gone quiet); otherwise every open
// file is in use and one is taken at random. Agents send batches
// periodically, so under strict least-recently-written order the file
// parked would be the one written next, and every batch would park and
// reopen a file once there are more agents than the budget; a random
// choice parks one file in about max/(agents-max) batches instead.
//
// Parking does not sync (the interval policy's background sync reopens
// a parked file to sync it, within the budget), except batches written and not yet
// committed under FsyncPerBatch; it runs on the writing goroutine of the
// agent that needs the descriptor.

// DefaultFileReserve is what DefaultMaxOpenFiles leaves to everything
// but agent files and connections: listeners, the state file, the
// directories being synced, repair, taps, metrics, Redis, the runtime.
const DefaultFileReserve = 256

// MinMaxOpenFiles is the smallest budget Config.MaxOpenFiles accepts.
const MinMaxOpenFiles = 4

// staleAfter is how long a file goes unwritten before the budget parks
// it ahead of the files in use.
const staleAfter = 5 * time.Second

// DefaultMaxOpenFiles returns the budget the Store uses when
// Config.MaxOpenFiles is 0 and the process may hold nofile descriptors
// (RLIMIT_NOFILE; Go raises the soft limit to the hard one at start):
// half of what DefaultFileReserve leaves, since each agent holds one
// connection and at most one file; the connections and the reserve get
// the other half. At least MinMaxOpenFiles.
func DefaultMaxOpenFiles(nofile uint64) int {
	if nofile < DefaultFileReserve+2*MinMaxOpenFiles {
		return MinMaxOpenFiles
	}
	return int(min((nofile-DefaultFileReserve)/2, 1<<30))
}

// noFileLimit returns the process's RLIMIT_NOFILE (soft).
func noFileLimit() uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 1024
	}
	return rl.Cur
}

// fileBudget bounds the agent files open at once. Lock order: a
// Writer's mutex, then fileBudget.mu; holding mu, the budget only tries
// a Writer's mutex (TryLock), never waits for one. A nil *fileBudget is
// no budget.
type fileBudget struct {
	max      int
	counters *Counters

	mu         sync.Mutex
	open       []*agentFile // files holding a descriptor; agentFile.slot indexes it
	head, tail *agentFile   // the same, most recently written first
	extra      int          // descriptors on files being repaired or parked files being synced

	nopen atomic.Int64 // len(open), for readers without mu
}

func newFileBudget(max int, c *Counters) *fileBudget {
	if max <= 0 {
		return nil
	}
	return &fileBudget{max: max, counters: c}
}

// acquire takes a descriptor for af, which holds none, parking another
// file when the budget is spent. af's Writer mutex is held; af nil takes
// one for a file being repaired or a parked file's sync (release(nil)
// gives it back). It waits
// (polling) while every open file is busy in its Writer.
func (b *fileBudget) acquire(af *agentFile, now time.Time) {
	if b == nil {
		return
	}
	for wait := 20 * time.Microsecond; ; wait = min(2*wait, 5*time.Millisecond) {
		b.mu.Lock()
		if len(b.open)+b.extra < b.max {
			b.add(af, now)
			b.mu.Unlock()
			return
		}
		if v := b.victim(now); v != nil {
			b.remove(v)
			b.add(af, now)
			b.mu.Unlock()
			err := v.park()
			v.mu.Unlock()
			if err != nil {
				b.counters.FileErrors.Add(1)
				v.logErr("parking file for the open-file budget", err)
			}
			return
		}
		b.mu.Unlock()
		time.Sleep(wait)
	}
}

// victim returns an open file to park, its Writer mutex locked, or nil
// if every one is busy. b.mu is held.
func (b *fileBudget) victim(now time.Time) *agentFile {
	if t := b.tail; t != nil && now.Sub(t.lastWrite) >= staleAfter && t.lockIdle() {
		return t
	}
	for range min(8, len(b.open)) {
		if v := b.open[rand.IntN(len(b.open))]; v.lockIdle() {
			return v
		}
	}
	for v := b.tail; v != nil; v = v.prev {
		if v.lockIdle() {
			return v
		}
	}
	return nil
}

// lockIdle locks af's Writer mutex if it is free and no background sync
// of af's descriptor runs: closing a descriptor that an fsync still uses
// frees it only when the fsync returns, so parking it then would hold
// one descriptor more than the budget.
func (af *agentFile) lockIdle() bool {
	if !af.mu.TryLock() {
		return false
	}
	if af.syncing != nil {
		af.mu.Unlock()
		return false
	}
	return true
}

// release gives back af's descriptor (it was closed).
func (b *fileBudget) release(af *agentFile) {
	if b == nil {
		return
	}
	b.mu.Lock()
	switch {
	case af == nil:
		b.extra--
	case af.slot >= 0:
		b.remove(af)
	}
	b.mu.Unlock()
}

// handOff turns af's slot into one a background sync of af's closed
// descriptor holds (the descriptor stays open until that fsync
// returns); the sync gives it back with release(nil). It reports
// whether af had a slot.
func (b *fileBudget) handOff(af *agentFile) bool {
	if b == nil {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if af.slot < 0 {
		return false
	}
	b.remove(af)
	b.extra++
	return true
}

// touch notes a write to af, which holds a descriptor.
func (b *fileBudget) touch(af *agentFile, now time.Time) {
	if b == nil {
		return
	}
	b.mu.Lock()
	if af.slot >= 0 {
		af.lastWrite = now
		if b.head != af {
			b.unlink(af)
			b.pushFront(af)
		}
	}
	b.mu.Unlock()
}

func (b *fileBudget) add(af *agentFile, now time.Time) {
	if af == nil {
		b.extra++
		return
	}
	af.slot = len(b.open)
	b.open = append(b.open, af)
	af.lastWrite = now
	b.pushFront(af)
	b.nopen.Store(int64(len(b.open)))
}

func (b *fileBudget) remove(af *agentFile) {
	last := b.open[len(b.open)-1]
	b.open[af.slot], last.slot = last, af.slot
	b.open[len(b.open)-1] = nil
	b.open = b.open[:len(b.open)-1]
	af.slot = -1
	b.unlink(af)
	b.nopen.Store(int64(len(b.open)))
}

func (b *fileBudget) pushFront(af *agentFile) {
	af.prev, af.next = nil, b.head
	if b.head != nil {
		b.head.prev = af
	} else {
		b.tail = af
	}
	b.head = af
}

func (b *fileBudget) unlink(af *agentFile) {
	if af.prev != nil {
		af.prev.next = af.next
	} else {
		b.head = af.next
	}
	if af.next != nil {
		af.next.prev = af.prev
	} else {
		b.tail = af.prev
	}
	af.prev, af.next = nil, nil
}

// bufPool holds the 1 MiB write buffers of files: a parked file gives
// its buffer back, so the buffers follow the open files, not the agents.
var bufPool = sync.Pool{New: func() any { return newFileBuf(1 << 20) }}

func getBuf(dst io.Writer) *fileBuf {
	bw := bufPool.Get().(*fileBuf)
	bw.Reset(dst)
	return bw
}

func putBuf(bw *fileBuf) {
	bw.Reset(nil)
	bufPool.Put(bw)
}

// errParkedWrite is what a write to a parked file returns: none is
// made while it is parked.
var errParkedWrite = errors.New("write to a parked file")

type parkedWriter struct{}

func (parkedWriter) Write([]byte) (int, error) { return 0, errParkedWrite }

// park writes out what af buffers, completes its compressed stream on
// disk and closes its descriptor, keeping everything else (see above).
// af's Writer mutex is held, and af has released its budget slot. On a
// write error the file is cut back (abandon) instead.
func (af *agentFile) park() error {
	before := af.diskEnd
	err := af.bw.Flush()
	if err == nil && af.mw != nil {
		err = af.mw.commit(false)
	}
	if err == nil {
		af.committedEnd = af.markEnd
		af.addDisk()
		wrote := af.diskEnd != before
		af.dirty = af.dirty || wrote
		if wrote && af.fsync == FsyncPerBatch {
			// Batches written and not committed yet: their Commit finds
			// nothing to flush, so they are synced here.
			err = af.sync(time.Now())
		}
	}
	if t := af.mw.terminator(af.diskEnd); err == nil && len(t) > 0 {
		_, err = af.f.WriteAt(t, af.diskEnd)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("parking %s: %w", af.path, err), af.abandon())
	}
	if af.syncing == af.f {
		af.syncing = nil // its descriptor is freed when that fsync returns
	}
	err = af.f.Close()
	putBuf(af.bw)
	af.w.SetWriter(parkedWriter{})
	af.f, af.bw, af.parked = nil, nil, true
	if af.mw != nil {
		af.mw.park()
	}
	if af.counters != nil {
		af.counters.BudgetParks.Add(1)
	}
	if err != nil {
		return fmt.Errorf("parking %s: %w", af.path, err)
	}
	return nil
}

// resume reopens af's parked file for append, taking a budget slot, and
// writes the interface blocks of interfaces added while it was parked.
// On failure the file is left as it is, with its suffix, for the next
// start to repair, and af has no file.
func (af *agentFile) resume(now time.Time) error {
	af.budget.acquire(af, now)
	part := af.path + layout.PartSuffix
	f, err := safefs.OpenIn(filepath.Dir(af.dir), filepath.Join(filepath.Base(af.dir), filepath.Base(part)), os.O_WRONLY, 0)
	if err == nil {
		err = reopenAt(f, af.diskEnd, len(af.mw.terminator(af.diskEnd)))
		if err != nil {
			f.Close()
		}
	}
	if err != nil {
		af.budget.release(af)
		af.parked, af.w = false, nil
		return fmt.Errorf("reopening %s: %w", part, err)
	}
	var dst io.Writer = f
	if af.mw != nil {
		af.mw.setFile(f)
		dst = af.mw
	}
	af.f, af.bw, af.parked = f, getBuf(dst), false
	af.w.SetWriter(af.bw)
	if af.counters != nil {
		af.counters.BudgetReopens.Add(1)
	}
	for i := af.w.Interfaces(); i < len(af.ifaces); i++ {
		if _, err := af.w.AddInterface(af.idb(i)); err != nil {
			return fmt.Errorf("writing interface block to %s: %w", af.path, err)
		}
	}
	return nil
}

// reopenAt positions f, a parked file, at end: the file must hold end
// bytes and then exactly tail more (the zstd terminator), which are cut.
func reopenAt(f *os.File, end int64, tail int) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != end+int64(tail) {
		return fmt.Errorf("size %d, parked at %d+%d: changed meanwhile", st.Size(), end, tail)
	}
	if tail > 0 {
		if err := f.Truncate(end); err != nil {
			return err
		}
	}
	_, err = f.Seek(end, io.SeekStart)
	return err
}

// logErr logs an error of af's file.
func (af *agentFile) logErr(msg string, err error) {
	if af.log != nil {
		af.log.Error(msg, "agent", af.name, "err", err)
	}
}

// OpenFiles returns the agent files holding a descriptor now (0 without
// a budget: they are not counted then).
func (s *Store) OpenFiles() int {
	if s.budget == nil {
		return 0
	}
	return int(s.budget.nopen.Load())
}

// MaxOpenFiles returns the open-file budget in force (Config.MaxOpenFiles
// with its default applied); negative for none.
func (s *Store) MaxOpenFiles() int { return s.cfg.MaxOpenFiles }

// isParked reports whether w's file is parked.
func (w *Writer) isParked() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.file.parked
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// parkedSyncDue returns the path of the parked file if it has data not
// yet synced and is due for a sync under an interval policy, else "".
// Like syncDue, it counts the data as synced; syncParked reports back.
func (af *agentFile) parkedSyncDue(now time.Time) string {
	if !af.parked || !af.dirty || af.fsync <= 0 || now.Sub(af.lastSync) < af.fsync {
		return ""
	}
	af.dirty = false
	return af.path + layout.PartSuffix
}

// syncParked syncs the parked file path of w through a descriptor of
// its own, taken from the budget, without holding w's mutex. A file gone
// meanwhile was closed, and synced then.
func (s *Store) syncParked(w *Writer, path string, start time.Time) error {
	s.budget.acquire(nil, start)
	f, err := safefs.Open(path)
	if err == nil {
		err = errors.Join(syncFile(s.cfg.SyncLatency, f), f.Close())
	}
	s.budget.release(nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.file.dirty = true
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	if w.file.parked && w.file.path+layout.PartSuffix == path {
		w.file.lastSync = start
	}
	return nil
}
