package store

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Writer writes the files of one agent name, below Dir/<name>/: one
// open file at a time, rotated by size and time. Its methods are safe
// for concurrent use (a mutex per Writer); batches written by several
// goroutines at once land in the file in the order the calls took the
// lock, so a caller that needs an order (a session's) writes from one
// goroutine. Once its agent is released (Store.Release; Store.Close in
// Shared mode) every method that writes fails with ErrReleased.
type Writer struct {
	st   *Store
	name string
	lock *os.File // Shared: holds the agent's lock; nil otherwise

	mu          sync.Mutex // guards file, lingerUntil, cuts, released
	file        agentFile
	lingerUntil time.Time
	cuts        uint64 // file.cuts after the last write
	released    bool

	diskBytes atomic.Uint64 // bytes that reached the agent's files
}

// WriterStats is a snapshot of a Writer: what reached its files and
// the loss counters last given to RecordStats.
type WriterStats struct {
	DiskBytes uint64 // bytes that reached its files on disk (the compressed size with FileCompress)

	// Summed over the interfaces with counters: packets captured and
	// dropped by the kernel; the agent's own drops; when the latest
	// counters were taken (zero before any).
	Captured, KernelDrops, AgentDrops uint64
	ReportTime                        time.Time

	// Interfaces are the agent's interfaces as its file declares them
	// (the hello's and those declared since), each with the counters
	// its agent last reported for it.
	Interfaces []IfaceStats
}

// IfaceStats is one interface of WriterStats.
type IfaceStats struct {
	wire.Interface
	// HaveStats: the agent reported counters for it (since the agent
	// started): Received, KernelDrops, Captured.
	HaveStats                       bool
	Received, KernelDrops, Captured uint64
}

// Name returns the agent name.
func (w *Writer) Name() string { return w.name }

// Start tells the Writer that a session of its agent starts on host:
// files opened from now on say so, and a pending idle close (Linger) is
// cancelled, so the session continues the open file.
func (w *Writer) Start(host string) {
	w.mu.Lock()
	if !w.released {
		w.file.host = host
		w.lingerUntil = time.Time{}
	}
	w.mu.Unlock()
}

// AddInterface returns the file index of ifc: the index of an
// identical interface declared before, or of a new one, whose interface
// description block is added to the open file and starts every later
// file. WriteBatch and RecordStats take these indexes.
func (w *Writer) AddInterface(ifc wire.Interface) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return 0, fmt.Errorf("agent %q: %w", w.name, ErrReleased)
	}
	i, err := w.file.addIface(ifc)
	if err != nil {
		w.st.Counters.FileErrors.Add(1)
	}
	return i, err
}

// WriteBatch writes the packets of b, batch b.Seq of inst, into the
// agent's file, opening one (or rotating, when due) first. b must be
// decompressed and validated for len(ifmap) interfaces
// (wire.Batch.Validate): ifmap maps its interface indexes to file
// indexes (AddInterface). The last packet carries the batch's mark, so
// the batch counts as in the file exactly when the whole of it is. A
// packet longer than its link type allows is written cut, its original
// length kept (Counters.Truncated); b itself is not modified.
//
// It returns the captured bytes written. The batch reaches the OS, and
// raises inst's mark, with the next successful Commit. On failure (a
// full disk, an I/O error) the file is cut back to its last Commit and
// closed, still readable; the error is counted in Counters.FileErrors.
func (w *Writer) WriteBatch(b *wire.Batch, ifmap []int, inst *Instance) (bytes uint64, err error) {
	return w.writeBatch(b, nil, ifmap, inst)
}

// WriteDecoded is WriteBatch for a batch already decoded (recs, from
// wire.Batch.Decode, which validated it): it writes recs instead of
// decoding b's records again. It may cut recs' packets (as WriteBatch
// cuts what it writes).
func (w *Writer) WriteDecoded(b *wire.Batch, recs []wire.Record, ifmap []int, inst *Instance) (bytes uint64, err error) {
	if len(recs) != int(b.Count) {
		return 0, fmt.Errorf("agent %q: batch %d: %d decoded records, the batch holds %d", w.name, b.Seq, len(recs), b.Count)
	}
	return w.writeBatch(b, recs, ifmap, inst)
}

// writeBatch is WriteBatch (recs nil) and WriteDecoded.
func (w *Writer) writeBatch(b *wire.Batch, recs []wire.Record, ifmap []int, inst *Instance) (bytes uint64, err error) {
	if ret := w.file.ret; ret != nil {
		ret.Admit(int64(len(b.Records))) // retention's write gate: usually no wait
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return 0, fmt.Errorf("agent %q: %w", w.name, ErrReleased)
	}
	af := &w.file
	now := time.Now()
	if err := af.writable(now); err != nil {
		return 0, w.failed(err)
	}
	w.st.budget.touch(af, now)
	put := func(i uint32, r *wire.Record) error {
		if i < b.Count {
			return af.write(ifmap[r.IfIndex], r, nil)
		}
		return af.writeLast(ifmap[r.IfIndex], r, inst, b.Seq)
	}
	if recs != nil {
		for i := range recs {
			if err := put(uint32(i+1), &recs[i]); err != nil {
				return 0, w.failed(err)
			}
			bytes += uint64(len(recs[i].Data))
		}
	} else {
		var r wire.Record
		it := b.Iter(uint32(len(ifmap)))
		for i := uint32(1); it.Next(&r) == nil; i++ {
			if err := put(i, &r); err != nil {
				return 0, w.failed(err)
			}
			bytes += uint64(len(r.Data))
		}
	}
	w.cuts = af.cuts
	if af.ret != nil && af.bw != nil {
		af.ret.Note(retention.Event{Kind: retention.Buffered, Bytes: int64(af.bw.Buffered())})
	}
	return bytes, nil
}

// failed handles a failed write (disk full, I/O error): the file is cut
// back to its last commit and closed, still readable. w.mu must be held.
func (w *Writer) failed(err error) error {
	w.st.Counters.FileErrors.Add(1)
	if aerr := w.file.abandon(); aerr != nil {
		w.st.log.Error("cutting back the file after a write error", "agent", w.name, "err", aerr)
	}
	return err
}

// Commit hands what was written to the OS (and syncs it under
// FsyncPerBatch) and raises the high-water mark of every instance with
// batches in the open file to its highest batch there. It fails, and
// raises nothing, when the flush fails (the file is then cut back as in
// WriteBatch) or with ErrCutBack when the file was cut back since the
// last write (a rotation or close failed): what was written since the
// last Commit is in no file.
func (w *Writer) Commit() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return fmt.Errorf("agent %q: %w", w.name, ErrReleased)
	}
	af := &w.file
	if err := af.flush(); err != nil {
		return w.failed(err)
	}
	if w.cuts != af.cuts {
		w.cuts = af.cuts
		return ErrCutBack
	}
	for _, m := range af.marked {
		m.inst.raise(m.seq)
	}
	return nil
}

// RecordStats takes an agent's loss counters (a Stats frame), written
// into the interface statistics blocks of the file when it closes.
// ifmap maps st's interface indexes to file indexes (AddInterface); an
// index beyond it is an error wrapping wire.ErrMalformed. grew reports
// whether a drop counter (the agent's, or an interface's kernel drops)
// grew.
func (w *Writer) RecordStats(st *wire.Stats, ifmap []int) (grew bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return false, fmt.Errorf("agent %q: %w", w.name, ErrReleased)
	}
	af := &w.file
	grew = st.AgentDrops > af.agentDrops
	af.agentDrops = st.AgentDrops
	for _, is := range st.Interfaces {
		if int(is.Index) >= len(ifmap) {
			return grew, fmt.Errorf("stats for interface %d, %d declared: %w", is.Index, len(ifmap), wire.ErrMalformed)
		}
		fi := &af.ifaces[ifmap[is.Index]]
		grew = grew || is.KernelDrops > fi.stats.KernelDrops
		fi.stats, fi.haveStats, fi.statsTime = is, true, st.Time
	}
	return grew, nil
}

// Close closes the open file, if any, and publishes it: the agent said
// goodbye. The next WriteBatch opens a new one.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.released {
		return fmt.Errorf("agent %q: %w", w.name, ErrReleased)
	}
	err := w.file.close(time.Now())
	if err != nil {
		w.st.Counters.FileErrors.Add(1)
	}
	return err
}

// Linger keeps the open file open for Config.IdleClose, then closes it
// (Store.Run), unless Start comes first: the agent's connection was
// lost, and a quick reconnect continues the file.
func (w *Writer) Linger() {
	w.mu.Lock()
	if !w.released {
		w.lingerUntil = time.Now().Add(w.st.cfg.IdleClose)
	}
	w.mu.Unlock()
}

// Stats returns a snapshot; it takes the Writer's lock briefly.
func (w *Writer) Stats() WriterStats {
	st := WriterStats{DiskBytes: w.diskBytes.Load()}
	w.mu.Lock()
	st.AgentDrops = w.file.agentDrops
	var latest int64
	st.Interfaces = make([]IfaceStats, len(w.file.ifaces))
	for i := range w.file.ifaces {
		fi := &w.file.ifaces[i]
		st.Interfaces[i] = IfaceStats{Interface: fi.ifc, HaveStats: fi.haveStats,
			Received: fi.stats.Received, KernelDrops: fi.stats.KernelDrops, Captured: fi.stats.Captured}
		if fi.haveStats {
			st.Captured += fi.stats.Captured
			st.KernelDrops += fi.stats.KernelDrops
			latest = max(latest, fi.statsTime)
		}
	}
	w.mu.Unlock()
	if latest != 0 {
		st.ReportTime = time.Unix(0, latest)
	}
	return st
}
