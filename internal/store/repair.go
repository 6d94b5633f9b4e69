package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// Test hooks, nil outside tests: testRepairStart runs before an agent's
// directory is repaired (a test holds the repair there), testRepairFault
// before a file is cut or removed (a test makes the repair fail there).
var (
	testRepairStart func(agent string)
	testRepairFault func(path string) error
)

// repairJob is one agent directory holding unfinished files.
type repairJob struct {
	name  string
	parts []string
}

// startRepairs finds every agent directory holding files a previous run
// left unfinished and repairs them in one background goroutine, one
// directory after the other (repair reads and decompresses: one core's
// work). Until an agent's directory is done, Writer refuses the agent
// with ErrBusy, so that its marks are known before anything is written
// for it (a collector's Welcome never misses them); every other agent
// is served meanwhile. c.repairDone is closed when the goroutine ends;
// Close lets it finish until its context ends, then cancels it.
func (c *Store) startRepairs() error {
	c.repairDone = make(chan struct{})
	c.repairing = map[string]bool{}
	var jobs []repairJob
	ents, err := os.ReadDir(c.dir)
	if err != nil {
		close(c.repairDone)
		return fmt.Errorf("store: reading %s: %w", c.dir, err)
	}
	for _, e := range ents {
		if !e.IsDir() || wire.ValidateName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(c.dir, e.Name())
		// Left by a crash during a zstd repair of an earlier version.
		if stale, _ := filepath.Glob(filepath.Join(dir, "*"+layout.PartSuffix+".repair")); len(stale) > 0 {
			for _, s := range stale {
				os.Remove(s)
			}
		}
		if parts := partFiles(dir); len(parts) > 0 {
			jobs = append(jobs, repairJob{name: e.Name(), parts: parts})
			c.repairing[e.Name()] = true
		}
	}
	if len(jobs) == 0 {
		close(c.repairDone)
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopRepairs = cancel
	c.log.Info("repairing unfinished files in the background; their agents wait until theirs are done", "agents", len(jobs))
	go func() {
		defer close(c.repairDone)
		for _, j := range jobs {
			c.repairAgent(ctx, j)
			if ctx.Err() != nil {
				return // shutting down: the agent stays refused
			}
			c.mu.Lock()
			delete(c.repairing, j.name)
			c.mu.Unlock()
		}
	}()
	return nil
}

// repairAgent repairs the unfinished files of one agent (see
// repairPart), raises its instances' high-water marks to the batches
// they hold, saves the state file and then renames the files it
// finished: only .part files are scanned on start, so the marks must be
// saved before the suffix goes (a crash before the renames repeats the
// repair, which is idempotent). A file it cannot finish keeps its
// suffix, for the next start; the batches it was found to hold count
// all the same.
func (c *Store) repairAgent(ctx context.Context, j repairJob) {
	if testRepairStart != nil {
		testRepairStart(j.name)
	}
	start := time.Now()
	var size int64
	for _, p := range j.parts {
		if st, err := os.Stat(p); err == nil {
			size += st.Size()
		}
	}
	c.log.Info("repairing unfinished files", "agent", j.name, "files", len(j.parts), "bytes", size)
	type finished struct {
		part string
		res  repairResult
	}
	var done []finished
	var kept, failed int
	marked := false
	for _, p := range j.parts {
		// The index written with it stops at the crash, and the cut may
		// fall before its last block: removed (pcapsync index rebuilds it).
		if err := os.Remove(index.Path(p)); err == nil {
			c.log.Info("removed the index of an unfinished file", "file", p)
		}
		// So do its flow records, whose block numbers are the removed
		// index's: pcapsync index rebuilds both, in one pass (flows.go).
		if err := os.Remove(flow.Path(p)); err == nil {
			c.log.Info("removed the flow records of an unfinished file", "file", p)
		}
		c.budget.acquire(nil, time.Now()) // its descriptor counts in the open-file budget
		res, err := repairPart(ctx, p)
		c.budget.release(nil)
		for id, seq := range res.marks {
			c.Instance(id, j.name).raise(seq)
			marked = true
		}
		switch {
		case err != nil && ctx.Err() != nil:
			c.log.Info("repair interrupted by shutdown; the file stays unfinished, for the next start", "file", p)
			return
		case err != nil:
			failed++
			c.Counters.FileErrors.Add(1)
			c.log.Error("repair failed: the file stays unfinished (.part) and is repaired again at the next start; the batches found in it still count",
				"file", p, "bytes", res.size, "batches_found_up_to", res.cut, "instances", len(res.marks), "err", err)
		case res.kept == 0:
			c.log.Warn("removed unfinished file holding no acknowledged batch", "file", p, "bytes", res.size)
		default:
			done = append(done, finished{p, res})
		}
	}
	if marked {
		if err := c.mode.saveMarks(j.name); err != nil {
			// The marks stay raised in memory and are saved with the next
			// state save; the files keep their suffix, for the next start.
			c.Counters.FileErrors.Add(1)
			c.log.Error("saving state after repair; the repaired files stay unfinished (.part) until the next start",
				"agent", j.name, "files", len(done), "err", err)
			return
		}
	}
	renamed := false
	for _, d := range done {
		name := strings.TrimSuffix(d.part, layout.PartSuffix)
		if err := os.Rename(d.part, name); err != nil {
			failed++
			c.Counters.FileErrors.Add(1)
			c.log.Error("renaming repaired file; it stays unfinished (.part) until the next start", "file", d.part, "err", err)
			continue
		}
		renamed = true
		kept++
		c.log.Warn("repaired unfinished file", "file", name, "kept_bytes", d.res.kept, "cut_bytes", d.res.size-d.res.kept)
	}
	if renamed {
		if err := syncDir(filepath.Join(c.dir, j.name)); err != nil {
			c.log.Error("syncing directory after repair", "agent", j.name, "err", err)
		}
	}
	elapsed := time.Since(start)
	c.log.Info("repair done", "agent", j.name, "files", len(j.parts), "kept", kept, "failed", failed,
		"bytes", size, "duration", elapsed.Round(time.Millisecond),
		"mb_per_s", int64(float64(size)/1e6/max(elapsed.Seconds(), 1e-6)))
}

// repairResult is what repairPart found and did.
type repairResult struct {
	marks map[[16]byte]uint64 // highest batch mark per instance in what is kept
	size  int64               // file size before
	cut   int64               // where the kept part ends (before any zstd terminator); 0: no mark
	kept  int64               // file size after; 0 if removed (or not repaired)
}

// repairPart finishes an unfinished file in place: it reads the file as
// a stream (layout.Scan), cuts it back to the last point after a complete
// batch (a mark) where the compressed stream can end (anywhere in a
// plain file, at a gzip member's end, at a zstd block's end, followed by
// an empty last block), and syncs it. Nothing is rewritten, so repair
// needs no free space beyond the terminator. A file without a mark
// holds nothing acknowledged and is removed. The caller renames it.
//
// The returned marks are those of the part kept, also with an error:
// when the scan stops on a read error or the cut fails, they are still
// in the file (the next repair keeps them), and must count.
func repairPart(ctx context.Context, path string) (res repairResult, err error) {
	codec := layout.CodecOf(path)
	f, err := safefs.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return res, err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return res, err
	}
	res.size = st.Size()
	sc, err := layout.Scan(ctx, f, codec)
	res.marks, res.cut = sc.Marks, sc.Cut
	if err != nil {
		return res, err
	}
	if testRepairFault != nil {
		if err := testRepairFault(path); err != nil {
			return res, err
		}
	}
	if sc.Cut == 0 {
		f.Close()
		f = nil
		return res, os.Remove(path)
	}
	var tail []byte
	if codec == compress.Zstd && !(sc.Complete && sc.Cut == res.size) {
		if tail, err = zstdTail(f, sc.Cut, sc.Raw); err != nil {
			return res, err
		}
	}
	if sc.Cut != res.size || len(tail) > 0 {
		if err := f.Truncate(sc.Cut); err != nil {
			return res, fmt.Errorf("cutting back: %w", err)
		}
		if _, err := f.WriteAt(tail, sc.Cut); err != nil {
			return res, fmt.Errorf("ending the zstd frame: %w", err)
		}
	}
	if err := f.Sync(); err != nil {
		return res, fmt.Errorf("syncing: %w", err)
	}
	err = f.Close()
	f = nil
	if err != nil {
		return res, err
	}
	res.kept = sc.Cut + int64(len(tail))
	return res, nil
}

// zstdTail returns what must follow the first cut bytes of a zstd file
// for them to be a complete stream decoding to raw bytes: the empty last
// block when the cut falls inside a frame (the usual case: a flush),
// nothing when it falls at a frame's end. It decodes the result to prove
// it before anything is cut, so a cut that does not decode is never made.
func zstdTail(f *os.File, cut, raw int64) ([]byte, error) {
	for _, tail := range [][]byte{zstdLastBlock[:], nil} {
		r := bufio.NewReaderSize(io.MultiReader(io.NewSectionReader(f, 0, cut), bytes.NewReader(tail)), layout.ScanBufSize)
		dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(index.MaxZstdWindow))
		if err != nil {
			return nil, err
		}
		out := &countingWriter{w: io.Discard}
		_, err = dec.WriteTo(out)
		dec.Close()
		if err == nil && out.n.Load() == raw {
			return tail, nil
		}
	}
	return nil, fmt.Errorf("verifying the cut: the first %d bytes do not decode to the %d bytes scanned; left as it is", cut, raw)
}

// zstdLastBlock is an empty last block (raw, size 0): what a zstd frame
// cut at a block's end needs to be complete (the frames carry no
// checksum).
var zstdLastBlock = [3]byte{0x01, 0x00, 0x00}
