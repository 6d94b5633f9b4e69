package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/observe"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// fileIface is one interface of an agent's output: its IDB and the
// last counters its agent reported for it.
type fileIface struct {
	ifc       wire.Interface
	stats     wire.IfaceStats
	haveStats bool
	statsTime int64
}

type markRef struct {
	inst *Instance
	seq  uint64
}

// agentFile is the pcapng output of one agent: the open file, if any,
// and the interfaces every new file starts with. File interface i is
// ifaces[i] in every file. Not safe for concurrent use; Writer.mu guards it.
type agentFile struct {
	dir        string // Dir/<name>
	name, host string
	size       int64
	interval   time.Duration
	fsync      time.Duration
	comp       compress.Spec
	zframes    ZstdFrames       // of zstd files
	saveState  func() error     // persists every instance's high-water mark
	syncObs    observe.Observer // Config.SyncLatency; nil for none
	counters   *Counters        // FilesClosed, FilesRotated; nil in some tests
	diskBytes  *atomic.Uint64   // bytes that reached the files; nil in some tests
	log        *slog.Logger     // nil in some tests

	// The open-file budget (budget.go); budget is nil for none.
	budget     *fileBudget
	mu         *sync.Mutex      // the Writer's, which guards this agentFile
	slot       int              // index in budget.open; -1 without a descriptor
	prev, next *agentFile       // budget's list, guarded by budget.mu
	lastWrite  time.Time        // guarded by budget.mu
	parked     bool             // path is a file in progress whose descriptor the budget took
	syncing    *os.File         // f while a background sync of it runs
	owed       *os.File         // a closed descriptor a background sync still uses: synced releases its slot
	ret        *retention.Agent // retention's record of the agent (retain.go); nil in some tests

	// The index of the open file (index.go): ixBlock <= 0 writes none.
	ixBlock int64
	ix      *index.Builder // reused across files
	ixLive  bool           // ix indexes the open file
	ixWrote int            // blocks of ix written to the index file
	ixBytes int64          // bytes written to the index file
	ixLast  time.Time      // when blocks were last written to it

	// The flow file of the open file (flows.go): flOn writes one.
	flOn      bool
	flCfg     flow.Config
	ft        *flow.Table // the agent's flows, across its files
	flEnc     flow.Encoder
	flBuf     []byte    // encoded, not yet written
	flLive    bool      // the open file has a flow file
	fr        flow.Run  // same-flow packets summed for ft (flows.go)
	flBytes   int64     // bytes written to the flow file
	flLast    time.Time // when records were last written to it
	flEvicted uint64    // ft's evictions when the file opened

	ifaces     []fileIface
	agentDrops uint64

	f        *os.File
	mw       *memberWriter // between bw and f when comp is set; reused across files
	frameRaw int64         // decoded offset where the open zstd frame starts (ZstdFramePerBlock)
	bw       *fileBuf
	w        *pcapfile.NgWriter
	path     string // final name, without layout.PartSuffix
	rotateAt time.Time

	marked       []markRef        // instances with marks in this file, highest seq
	markEnd      int64            // offset after the last mark written
	committedEnd int64            // markEnd at the last successful flush
	diskEnd      int64            // file size at the last successful flush: where abandon cuts
	cuts         uint64           // times abandon cut uncommitted batches away
	unpublished  []string         // closed part files whose publish failed
	dirty        bool             // flushed but not synced
	ts           layout.TimeRange // of the packets written to the open file
	tsFlushed    layout.TimeRange // ts at the last successful flush
	lastSync     time.Time
	markBuf      [layout.MarkSize]byte
}

// addIface returns the file index of ifc, adding an interface (and an
// IDB to the open file) if the agent never declared one like it.
func (af *agentFile) addIface(ifc wire.Interface) (int, error) {
	for i := range af.ifaces {
		if af.ifaces[i].ifc == ifc {
			return i, nil
		}
	}
	af.ifaces = append(af.ifaces, fileIface{ifc: ifc})
	if af.f != nil {
		if _, err := af.w.AddInterface(af.idb(len(af.ifaces) - 1)); err != nil {
			return 0, fmt.Errorf("writing interface block to %s: %w", af.path, err)
		}
	}
	return len(af.ifaces) - 1, nil
}

// idb is interface i's description block (see InterfaceBlock).
func (af *agentFile) idb(i int) pcapfile.Interface {
	return InterfaceBlock(af.name, af.host, af.ifaces[i].ifc)
}

// InterfaceBlock describes interface ifc of agent (on host) as the files
// do: named after agent and interface, "web1:eth0", so a merged or
// tapped stream still says where each packet came from.
func InterfaceBlock(agent, host string, ifc wire.Interface) pcapfile.Interface {
	return pcapfile.Interface{
		Name:        agent + ":" + ifc.Name,
		Description: fmt.Sprintf("%s on host %s (pcapsync agent %s)", ifc.Name, host, agent),
		LinkType:    ifc.LinkType,
		SnapLen:     ifc.SnapLen,
	}
}

// open starts a new file: section header and every known interface.
func (af *agentFile) open(now time.Time) error {
	if af.comp.Codec != compress.None && af.mw == nil {
		mw, err := newMemberWriter(af.comp, af.zframes)
		if err != nil {
			return fmt.Errorf("file compression: %w", err)
		}
		af.mw = mw
	}
	af.budget.acquire(af, now)
	f, path, err := af.create(now)
	if err != nil {
		af.budget.release(af)
		return err
	}
	var dst io.Writer = f
	if af.mw != nil {
		af.mw.reset(f)
		dst = af.mw
	}
	bw := getBuf(dst)
	w, err := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{
		OS:       "Linux",
		UserAppl: "pcapsync collector",
		Comment:  fmt.Sprintf("pcapsync agent %s on host %s", af.name, af.host),
	})
	for i := 0; err == nil && i < len(af.ifaces); i++ {
		_, err = w.AddInterface(af.idb(i))
	}
	if err == nil {
		err = bw.Flush()
	}
	if err == nil && af.mw != nil {
		err = af.mw.commitHead() // a frame per block: the head's own frame
	}
	if err != nil {
		f.Close()
		af.budget.release(af)
		os.Remove(path + layout.PartSuffix)
		return fmt.Errorf("writing headers of %s: %w", path, err)
	}
	af.f, af.bw, af.w, af.path = f, bw, w, path
	af.frameRaw = w.Written()
	af.marked = af.marked[:0]
	af.markEnd, af.committedEnd, af.diskEnd = 0, 0, 0
	af.ts, af.tsFlushed = layout.TimeRange{}, layout.TimeRange{}
	af.dirty, af.lastSync = true, now
	af.rotateAt = time.Time{}
	if af.interval > 0 {
		af.rotateAt = now.Truncate(af.interval).Add(af.interval)
	}
	af.ixStart()
	af.flowStart()
	return nil
}

// create creates the .part of a new file named after now and returns
// it with the file's final name. A name taken in the same millisecond
// (by a file, or by a .part: O_EXCL) gets _001, _002, ...: '_' sorts
// after '.', so names sort in creation order. The agent's directory is
// made only when missing (at its first file, or removed by hand): a
// file opened costs one lstat and one open. The .part is created
// exclusively and never through a link: a directory of the agent that
// is a link fails with ErrAgentDir.
func (af *agentFile) create(now time.Time) (*os.File, string, error) {
	base := af.name + "_" + now.UTC().Format("20060102T150405.000") + "Z"
	ext := ".pcapng" + fileExt(af.comp.Codec)
	made := false
	for n := 0; ; {
		path := filepath.Join(af.dir, base+ext)
		if n > 0 {
			path = filepath.Join(af.dir, fmt.Sprintf("%s_%03d%s", base, n, ext))
		}
		if exists(path) {
			n++
			continue
		}
		root := filepath.Dir(af.dir)
		f, err := safefs.OpenIn(root, filepath.Join(filepath.Base(af.dir), filepath.Base(path)+layout.PartSuffix), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		switch {
		case err == nil:
			return f, path, nil
		case errors.Is(err, fs.ErrExist):
			n++
		case errors.Is(err, safefs.ErrLink), errors.Is(err, safefs.ErrNotDir), errors.Is(err, syscall.ENOTDIR):
			return nil, "", fmt.Errorf("creating output file: %w: %w", ErrAgentDir, err)
		case errors.Is(err, fs.ErrNotExist) && !made:
			// The root's own path is the operator's; the agent's
			// directory is one element below it, made without
			// following a link (Mkdir fails on one).
			if err := os.MkdirAll(root, 0o750); err != nil {
				return nil, "", fmt.Errorf("creating %s: %w", root, err)
			}
			if err := os.Mkdir(af.dir, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
				return nil, "", fmt.Errorf("creating %s: %w", af.dir, err)
			}
			made = true
		default:
			return nil, "", fmt.Errorf("creating output file: %w", err)
		}
	}
}

// onDisk is the size of the open file as written so far: for a
// compressed file, what the compressor has emitted.
func (af *agentFile) onDisk() int64 {
	if af.mw != nil {
		return af.mw.written()
	}
	return af.w.Written()
}

// reaches reports whether the open file has reached size bytes on disk
// (a compressed file's: memberWriter.reaches).
func (af *agentFile) reaches(size int64) bool {
	if af.mw != nil {
		return af.mw.reaches(size)
	}
	return af.w.Written() >= size
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}

// due reports whether the open file must be rotated before more is written.
func (af *agentFile) due(now time.Time) bool {
	return (af.f != nil || af.parked) && (af.size > 0 && af.reaches(af.size) ||
		!af.rotateAt.IsZero() && !now.Before(af.rotateAt))
}

// writable makes sure a file is open and not due for rotation.
func (af *agentFile) writable(now time.Time) error {
	if af.due(now) {
		af.rotated()
		if err := af.close(now); err != nil {
			return err
		}
	}
	if af.parked {
		return af.resume(now)
	}
	if af.f == nil {
		return af.open(now)
	}
	return nil
}

// write writes a packet on file interface ifIndex, with the batch mark
// mark (layout.AppendMark) when not nil, indexing it and adding it to
// the flow table.
func (af *agentFile) write(ifIndex int, r *wire.Record, mark []byte) error {
	af.fit(ifIndex, r)
	af.ts.Add(r.Timestamp)
	lt := uint32(af.ifaces[ifIndex].ifc.LinkType)
	var block uint32 // the index block the packet is in (0 without an index)
	same := false
	if af.ixLive {
		same = af.ix.Add(lt, r.Timestamp, r.Data)
		block = uint32(af.ix.Blocks())
	}
	// A packet whose headers the index builder found to be the packet's
	// before (Builder.Add's same: the builder and the table see the same
	// packets) is summed here, within the limits the table gave
	// (flow.Table.Repeats), and the sums handed over at the next packet
	// that is not such a one (flowSettle); else the table takes it.
	if af.flLive && !af.fr.Take(same, uint32(ifIndex), block, r.Timestamp, r.OrigLen, r.Data) {
		af.flowSettle()
		if !(same && af.ft.AddRepeat(uint32(ifIndex), r.Timestamp, r.OrigLen, r.Data, block)) {
			af.ft.Add(uint32(ifIndex), lt, r.Timestamp, r.OrigLen, r.Data, block)
		}
		af.fr.Renew(af.ft)
	}
	if mark != nil {
		return af.w.WritePacketCustom(ifIndex, r.Timestamp, r.OrigLen, r.Data, layout.MarkPEN, mark)
	}
	return af.w.WritePacket(ifIndex, r.Timestamp, r.OrigLen, r.Data)
}

// fit cuts a packet longer than its link type allows in pcapng readers
// (pcapfile.MaxCapLen) to that length, keeping its original length, and
// counts it: an agent that did not cut it (an old or a bogus one) must
// not make the file unreadable.
func (af *agentFile) fit(ifIndex int, r *wire.Record) {
	if limit := pcapfile.MaxCapLen(uint32(af.ifaces[ifIndex].ifc.LinkType)); uint32(len(r.Data)) > limit {
		r.OrigLen = max(r.OrigLen, uint32(len(r.Data)))
		r.Data = r.Data[:limit]
		if af.counters != nil {
			af.counters.Truncated.Add(1)
		}
	}
}

// writeLast writes the last packet of batch seq of inst with the mark
// that says the batch is complete in this file.
func (af *agentFile) writeLast(ifIndex int, r *wire.Record, inst *Instance, seq uint64) error {
	if err := af.write(ifIndex, r, layout.AppendMark(af.markBuf[:0], inst.id, seq)); err != nil {
		return err
	}
	af.markEnd = af.w.Written()
	for i := range af.marked {
		if af.marked[i].inst == inst {
			af.marked[i].seq = max(af.marked[i].seq, seq)
			return nil
		}
	}
	af.marked = append(af.marked, markRef{inst, seq})
	return nil
}

// flush hands everything written so far to the OS, and syncs it when
// the policy is per batch.
func (af *agentFile) flush() error {
	if af.bw == nil {
		return nil
	}
	if err := af.bw.Flush(); err != nil {
		return fmt.Errorf("writing %s: %w", af.path+layout.PartSuffix, err)
	}
	ended := false // a zstd frame (and a block of the index) ends here
	if af.mw != nil {
		ended = af.mw.frames && af.w.Written()-af.frameRaw >= af.frameBytes()
		if err := af.mw.commit(ended); err != nil {
			return fmt.Errorf("writing %s: %w", af.path+layout.PartSuffix, err)
		}
		if ended {
			af.frameRaw = af.w.Written()
		}
	}
	af.committedEnd = af.markEnd
	af.tsFlushed = af.ts
	af.addDisk()
	af.dirty = true
	af.ixCommit(ended)
	af.flowCommit()
	if af.fsync == FsyncPerBatch {
		return af.sync(time.Now())
	}
	return nil
}

// frameBytes is the decoded size after which a commit ends a zstd frame
// (ZstdFramePerBlock): the index's block size.
func (af *agentFile) frameBytes() int64 {
	if af.ixBlock > 0 {
		return af.ixBlock
	}
	return DefaultIndexBlock
}

// addDisk counts what reached the file since the last flush and moves
// diskEnd to its end.
func (af *agentFile) addDisk() {
	end := af.onDisk()
	if af.diskBytes != nil && end > af.diskEnd {
		af.diskBytes.Add(uint64(end - af.diskEnd))
	}
	if af.ret != nil {
		if end > af.diskEnd {
			af.ret.Note(retention.Event{Kind: retention.Wrote, Bytes: end - af.diskEnd, First: af.tsFlushed.Min})
		}
		af.ret.Note(retention.Event{Kind: retention.Flushed})
	}
	af.diskEnd = end
}

// rotated counts a file closed because it is due.
func (af *agentFile) rotated() {
	if af.counters != nil {
		af.counters.FilesRotated.Add(1)
	}
}

// syncFile syncs f, timing it for obs if set.
func syncFile(obs observe.Observer, f *os.File) error {
	if obs == nil {
		return f.Sync()
	}
	start := time.Now()
	err := f.Sync()
	if err == nil {
		obs.Observe(time.Since(start).Seconds())
	}
	return err
}

func (af *agentFile) sync(now time.Time) error {
	if err := syncFile(af.syncObs, af.f); err != nil {
		return fmt.Errorf("syncing %s: %w", af.path+layout.PartSuffix, err)
	}
	af.dirty, af.lastSync = false, now
	return nil
}

// syncDue returns the open file if it has unsynced data and is due for
// a sync under an interval policy, else nil. The caller syncs it
// without holding Writer.mu (a sync of hundreds of MB must not stall
// the writes) and reports back with synced.
func (af *agentFile) syncDue(now time.Time) *os.File {
	if af.f == nil || !af.dirty || af.fsync <= 0 || now.Sub(af.lastSync) < af.fsync {
		return nil
	}
	af.dirty = false // data flushed from now on sets it again
	af.syncing = af.f
	return af.f
}

// releaseFD gives back the budget slot of af.f, just closed: at once,
// or, while a background sync still uses the descriptor (it stays open
// until that fsync returns), when the sync reports back (synced).
func (af *agentFile) releaseFD() {
	if af.syncing != nil && af.syncing == af.f && af.budget.handOff(af) {
		af.owed = af.f
		return
	}
	af.budget.release(af)
}

// synced records the end of a sync of f started at start.
func (af *agentFile) synced(f *os.File, start time.Time, err error) error {
	if af.owed == f {
		af.owed = nil
		af.budget.release(nil)
	}
	if af.syncing == f {
		af.syncing = nil
	}
	if af.f != f {
		return nil // closed (and synced by close) or parked (dirty again) meanwhile
	}
	if err != nil {
		af.dirty = true
		return fmt.Errorf("syncing %s: %w", af.path+layout.PartSuffix, err)
	}
	af.lastSync = start
	return nil
}

// close ends the open file, if any, and publishes it (see closeFile and
// publish). Callers closing many files at once use closeFile and one
// publish instead: the state file is written once, not once per file.
func (af *agentFile) close(now time.Time) error {
	part, err := af.closeFile(now)
	if part == "" {
		return err
	}
	return publish(af.saveState, af.fsync != FsyncNever, []string{part})
}

// closeFile ends the open file, if any: an interface statistics block
// for every interface the agent reported counters for, flush, sync
// (unless the policy is never), close, and raise the instances' marks.
// It returns the path, still ending in layout.PartSuffix, for publish. After a
// failure it cuts the file back (abandon, which publishes it itself) and
// returns "".
func (af *agentFile) closeFile(now time.Time) (part string, err error) {
	if af.parked {
		if err := af.resume(now); err != nil {
			return "", err
		}
	}
	if af.f == nil {
		return "", nil
	}
	rawEnd := af.w.Written() // where the packets end, before the statistics
	var err0 error
	if af.mw != nil && af.mw.frames {
		// The statistics get a frame of their own, which a reader of
		// the last block need not decode, and vice versa.
		if err0 = af.bw.Flush(); err0 == nil {
			err0 = af.mw.commit(true)
		}
	}
	for i := range af.ifaces {
		fi := &af.ifaces[i]
		if !fi.haveStats || err0 != nil {
			continue
		}
		if err := af.w.WriteStats(i, pcapfile.InterfaceStats{
			Timestamp: fi.statsTime,
			IfRecv:    fi.stats.Received, HaveIfRecv: true,
			OsDrop: fi.stats.KernelDrops, HaveOsDrop: true,
			UsrDeliv: fi.stats.Captured, HaveUsrDeliv: true,
			Comment: fmt.Sprintf("counters since agent start; agent queue drops (all interfaces): %d; kernel queue freezes: %d",
				af.agentDrops, fi.stats.QueueFreezes),
		}); err != nil {
			break // the flush below reports it
		}
	}
	err = errors.Join(err0, af.bw.Flush())
	if err == nil && af.mw != nil {
		err = af.mw.finish()
	}
	if err == nil && af.fsync != FsyncNever {
		err = syncFile(af.syncObs, af.f)
	}
	if err != nil {
		return "", errors.Join(fmt.Errorf("closing %s: %w", af.path, err), af.abandon())
	}
	af.tsFlushed = af.ts
	af.addDisk()
	af.ixFinish(rawEnd)
	af.flowFinish()
	if af.ret != nil {
		af.ret.Note(retention.Event{Kind: retention.Closed, Name: filepath.Base(af.path), Bytes: af.diskEnd + af.ixBytes + af.flBytes, Mod: modTime(af.f), Times: af.ts, Kept: true})
	}
	if af.counters != nil {
		af.counters.FilesClosed.Add(1)
	}
	for _, m := range af.marked {
		m.inst.raise(m.seq)
	}
	part = af.path + layout.PartSuffix
	err = af.f.Close()
	af.releaseFD()
	putBuf(af.bw)
	af.f, af.bw, af.w = nil, nil, nil
	if err != nil {
		return "", fmt.Errorf("closing %s: %w", part, err)
	}
	return part, nil
}

// publish saves the state file (with the marks the closed files raised)
// and then renames each closed part file to its final name: only .part
// files are scanned on start, so their marks must be saved before the
// suffix goes. A crash in between leaves .part files that the next start
// repairs (a no-op cut) and renames.
func publish(saveState func() error, sync bool, parts []string) error {
	if saveState != nil {
		if err := saveState(); err != nil {
			return fmt.Errorf("saving state before renaming %d closed files: %w", len(parts), err)
		}
	}
	var errs []error
	dirs := map[string]bool{}
	for _, p := range parts {
		publishIndex(p)
		publishFlows(p)
		err := os.Rename(p, strings.TrimSuffix(p, layout.PartSuffix))
		if err != nil && !errors.Is(err, os.ErrNotExist) { // gone: published by an earlier try
			errs = append(errs, err)
		}
		if err == nil {
			publishBins(strings.TrimSuffix(p, layout.PartSuffix))
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		if sync {
			errs = append(errs, syncDir(d))
		}
	}
	return errors.Join(errs...)
}

// abandon cuts the open file back to the end of its last committed
// batch, discarding whatever was written after it, and closes it under
// its final name: readable, and holding only acknowledged batches.
func (af *agentFile) abandon() error {
	if af.f == nil {
		return nil
	}
	af.marked = af.marked[:0] // the cut ones must not be raised by a Commit
	af.ixDrop()
	af.flowAbandon()
	af.bw.Reset(io.Discard)
	t := af.mw.terminator(af.diskEnd)
	if af.mw != nil {
		af.mw.reset(io.Discard) // drop what the compressor holds
	}
	af.cuts++
	err := af.f.Truncate(af.diskEnd)
	if err == nil && len(t) > 0 && af.committedEnd > 0 {
		_, err = af.f.WriteAt(t, af.diskEnd)
	}
	if af.ret != nil {
		af.ret.Note(retention.Event{Kind: retention.Closed, Name: filepath.Base(af.path), Bytes: af.diskEnd + int64(len(t)), Mod: modTime(af.f), Times: af.tsFlushed, Kept: af.committedEnd > 0})
	}
	if af.committedEnd == 0 {
		// Nothing was ever committed: no file is better than an empty one.
		af.f.Close()
		af.releaseFD()
		rerr := os.Remove(af.path + layout.PartSuffix)
		af.f, af.bw, af.w = nil, nil, nil
		return errors.Join(err, rerr)
	}
	if err == nil && af.fsync != FsyncNever {
		err = af.f.Sync()
	}
	part := af.path + layout.PartSuffix
	if cerr := af.f.Close(); err == nil {
		err = cerr
	}
	af.releaseFD()
	af.f, af.bw, af.w = nil, nil, nil
	if err == nil {
		if perr := publish(af.saveState, af.fsync != FsyncNever, []string{part}); perr != nil {
			// The state cannot be saved (a full disk, say): the file keeps
			// its suffix until a tick manages to publish it, or the next
			// start repairs it. Readable all along; nothing is lost.
			af.unpublished = append(af.unpublished, part)
			err = perr
		}
	}
	if err != nil {
		return fmt.Errorf("closing %s: %w", af.path, err)
	}
	return nil
}

// modTime is f's modification time (Unix ns); 0 when it cannot be read
// (retention's saved index then does not vouch for the file).
func modTime(f *os.File) int64 {
	st, err := f.Stat()
	if err != nil {
		return 0
	}
	return st.ModTime().UnixNano()
}

// syncDir makes a rename or creation in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
