package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
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
		if stale, _ := filepath.Glob(filepath.Join(dir, "*"+PartSuffix+".repair")); len(stale) > 0 {
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
		if err := c.saveMarks(j.name); err != nil {
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
		name := strings.TrimSuffix(d.part, PartSuffix)
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
// a stream (scanPart), cuts it back to the last point after a complete
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
	codec := codecOf(path)
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
	sc, err := scanPart(ctx, f, codec)
	res.marks, res.cut = sc.marks, sc.cut
	if err != nil {
		return res, err
	}
	if testRepairFault != nil {
		if err := testRepairFault(path); err != nil {
			return res, err
		}
	}
	if sc.cut == 0 {
		f.Close()
		f = nil
		return res, os.Remove(path)
	}
	var tail []byte
	if codec == compress.Zstd && !(sc.complete && sc.cut == res.size) {
		if tail, err = zstdTail(f, sc.cut, sc.raw); err != nil {
			return res, err
		}
	}
	if sc.cut != res.size || len(tail) > 0 {
		if err := f.Truncate(sc.cut); err != nil {
			return res, fmt.Errorf("cutting back: %w", err)
		}
		if _, err := f.WriteAt(tail, sc.cut); err != nil {
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
	res.kept = sc.cut + int64(len(tail))
	return res, nil
}

// codecOf returns the compression of a data file by its name (with or
// without PartSuffix).
func codecOf(path string) compress.Codec {
	switch name := strings.TrimSuffix(path, PartSuffix); {
	case strings.HasSuffix(name, ".pcapng.gz"):
		return compress.Gzip
	case strings.HasSuffix(name, ".pcapng.zst"):
		return compress.Zstd
	}
	return compress.None
}

// zstdTail returns what must follow the first cut bytes of a zstd file
// for them to be a complete stream decoding to raw bytes: the empty last
// block when the cut falls inside a frame (the usual case: a flush),
// nothing when it falls at a frame's end. It decodes the result to prove
// it before anything is cut, so a cut that does not decode is never made.
func zstdTail(f *os.File, cut, raw int64) ([]byte, error) {
	for _, tail := range [][]byte{zstdLastBlock[:], nil} {
		r := bufio.NewReaderSize(io.MultiReader(io.NewSectionReader(f, 0, cut), bytes.NewReader(tail)), scanBufSize)
		dec, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, err
		}
		out := countingWriter{w: io.Discard}
		_, err = dec.WriteTo(&out)
		dec.Close()
		if err == nil && out.n == raw {
			return tail, nil
		}
	}
	return nil, fmt.Errorf("verifying the cut: the first %d bytes do not decode to the %d bytes scanned; left as it is", cut, raw)
}

// zstdLastBlock is an empty last block (raw, size 0): what a zstd frame
// cut at a block's end needs to be complete (the frames carry no
// checksum).
var zstdLastBlock = [3]byte{0x01, 0x00, 0x00}

// scanBufSize is the read size of repair: the file is read in chunks of
// this size whatever the codec reads at a time.
const scanBufSize = 256 << 10

// scanResult is where an unfinished file can be cut.
type scanResult struct {
	marks    map[[16]byte]uint64 // the highest mark per instance before cut
	cut      int64               // file offset of the cut; 0 when no mark was found
	raw      int64               // decompressed offset of the cut
	complete bool                // the whole file is a complete compressed stream
	times    tsRange             // the earliest and latest packet of every whole packet block
}

// scanPart reads a file r written with codec as one stream, in chunks
// of scanBufSize, decompressing it (gzip: member by member; zstd: block
// by block) into a blockScanner, and returns the last cut point: the
// furthest offset where the compressed stream can end, the decompressed
// stream is at the end of a marked batch (or of blocks after it that
// hold no packets), and every block before is whole. Memory stays
// bounded whatever the sizes of blocks, members or frames. A torn or
// corrupt tail ends the scan without an error; a read error or ctx
// ending is returned, with the cut found so far.
func scanPart(ctx context.Context, r io.Reader, codec compress.Codec) (scanResult, error) {
	return scanPartCuts(ctx, r, codec, nil)
}

// scanPartCuts is scanPart calling onCut, if set, with the
// decompressed offset of each new cut point as the scan finds it.
func scanPartCuts(ctx context.Context, r io.Reader, codec compress.Codec, onCut func(raw int64)) (scanResult, error) {
	cr := &countingReader{r: r}
	// The decompressors read from the bufio.Reader itself (flate has a
	// fast path for it, and zstd reads exactly what it decodes), so the
	// file offset they reached is what cr read minus what is buffered.
	br := bufio.NewReaderSize(cr, scanBufSize)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	sc := newBlockScanner()
	sc.onCut = onCut
	w := &scanWriter{ctx: ctx, sc: sc}
	var err error
	switch codec {
	case compress.None:
		sc.anywhere = true
		_, err = io.Copy(w, br)
	case compress.Gzip:
		var zr gzip.Reader
		for {
			if err = zr.Reset(br); err != nil {
				break // the end, or a torn header
			}
			zr.Multistream(false)
			if _, err = io.Copy(w, &zr); err != nil {
				break
			}
			sc.boundary(pos()) // a member's end
		}
	case compress.Zstd:
		// With one goroutine the decoder reads a block, decodes it and
		// writes its output in one Write, before it reads on: after each
		// Write the file offset is at the end of that block.
		dec, derr := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if derr != nil {
			return scanResult{}, derr
		}
		defer dec.Close()
		w.afterWrite = func() { sc.boundary(pos()) }
		_, err = dec.WriteTo(w)
	}
	res := scanResult{marks: sc.marks, cut: sc.cutOff, raw: sc.cutRaw, complete: err == nil || err == io.EOF, times: sc.times}
	if cr.err != nil {
		return res, fmt.Errorf("reading at offset %d: %w", cr.n, cr.err)
	}
	if cerr := ctx.Err(); cerr != nil {
		return res, cerr
	}
	return res, nil
}

// scanWriter feeds a blockScanner, stopping when ctx ends.
type scanWriter struct {
	ctx        context.Context
	sc         *blockScanner
	afterWrite func() // if set, called after each Write
}

func (w *scanWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := w.sc.Write(p)
	if err == nil && w.afterWrite != nil {
		w.afterWrite()
	}
	return n, err
}

// countingReader counts the bytes read from r and keeps the first
// error other than io.EOF.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// pcapng block types repair tells apart.
const (
	blockSHB = 0x0A0D0D0A
	blockEPB = 6
	blockSPB = 3 // simple packet block
	blockPB  = 2 // obsolete packet block
)

// maxScanOptions bounds the options of a packet block that repair reads
// to find its mark: the collector writes the mark as the block's only
// option, and repair skips the packet data itself, so it reads blocks of
// any size in bounded memory.
const maxScanOptions = 64 << 10

// errScanStopped: the stream stopped being whole pcapng blocks.
var errScanStopped = errors.New("not a whole pcapng block")

type scanState uint8

const (
	stHead    scanState = iota // block type and length
	stFixed                    // an EPB's fixed fields
	stData                     // an EPB's packet data, skipped
	stOpts                     // an EPB's options, read up to maxScanOptions
	stOptSkip                  // the rest of them, skipped
	stBody                     // another block's body, skipped
	stTrail                    // the trailing length
)

// blockScanner is an io.Writer that walks the pcapng blocks of the
// stream written to it, in pieces of any size, and records batch marks
// and cut points (see boundary). It stops, and its Write returns
// errScanStopped, at the first block that is not whole or not ours: a
// section header must come first, lengths must be multiples of 4 and
// match the trailing length. Its memory is bounded (maxScanOptions).
type blockScanner struct {
	anywhere bool // the stream can be cut after any block (a plain file)

	off     int64 // bytes consumed
	st      scanState
	need    int64 // bytes the state still needs
	buf     [32]byte
	bn      int // bytes in buf: header [0:8], EPB fields [8:28], trailer [28:32]
	typ     uint32
	blen    int64
	optLen  int64
	opts    []byte
	first   bool
	stopped bool

	ts    int64   // the timestamp of the packet block being read (if_tsresol 9, as the Store writes)
	times tsRange // of every whole packet block

	clean   bool  // a mark was seen and no packet block since
	end     int64 // offset after the last marked block, or after blocks without packets that follow it
	pending map[[16]byte]uint64
	marks   map[[16]byte]uint64 // up to the cut
	cutOff  int64               // stream offset of the last cut point
	cutRaw  int64               // its offset in the decompressed stream
	onCut   func(raw int64)     // if set, called with cutRaw when it moves
}

func newBlockScanner() *blockScanner {
	return &blockScanner{st: stHead, need: 8, first: true,
		pending: map[[16]byte]uint64{}, marks: map[[16]byte]uint64{}}
}

func (s *blockScanner) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if s.stopped {
			return n - len(p), errScanStopped
		}
		k := int(min(int64(len(p)), s.need))
		switch s.st {
		case stHead, stFixed, stTrail:
			s.bn += copy(s.buf[s.bn:], p[:k])
		case stOpts:
			s.opts = append(s.opts, p[:k]...)
		}
		p = p[k:]
		s.off += int64(k)
		s.need -= int64(k)
		if s.need == 0 {
			s.next()
		}
	}
	if s.stopped {
		return n, errScanStopped
	}
	return n, nil
}

// next moves to the next state once the current one has all its bytes.
func (s *blockScanner) next() {
	le := binary.LittleEndian
	for s.need == 0 && !s.stopped {
		switch s.st {
		case stHead:
			s.typ, s.blen = le.Uint32(s.buf[0:]), int64(le.Uint32(s.buf[4:]))
			switch {
			case s.blen < 12 || s.blen%4 != 0 || s.first && s.typ != blockSHB:
				s.stopped = true
			case s.typ == blockEPB && s.blen < 32:
				s.stopped = true
			case s.typ == blockEPB:
				s.st, s.need = stFixed, 20
			default:
				s.st, s.need = stBody, s.blen-12
			}
		case stFixed:
			s.ts = int64(le.Uint32(s.buf[12:]))<<32 | int64(le.Uint32(s.buf[16:]))
			caplen := int64(le.Uint32(s.buf[20:]))
			data := caplen + (-caplen & 3)
			s.optLen = s.blen - 32 - data
			if s.optLen < 0 {
				s.stopped = true
				break
			}
			s.st, s.need = stData, data
		case stData:
			s.opts = s.opts[:0]
			s.st, s.need = stOpts, min(s.optLen, maxScanOptions)
		case stOpts:
			s.st, s.need = stOptSkip, s.optLen-int64(len(s.opts))
		case stOptSkip, stBody:
			s.st, s.need, s.bn = stTrail, 4, 28
		case stTrail:
			if int64(le.Uint32(s.buf[28:])) != s.blen {
				s.stopped = true
				break
			}
			s.st, s.need, s.bn = stHead, 8, 0
			s.blockDone()
		}
	}
}

// blockDone records a whole block that ends at s.off.
func (s *blockScanner) blockDone() {
	s.first = false
	switch {
	case s.typ == blockEPB:
		s.times.add(s.ts)
		if id, seq, ok := markIn(s.opts); ok {
			s.pending[id] = max(s.pending[id], seq)
			s.clean, s.end = true, s.off
		} else {
			s.clean = false
		}
	case s.typ == blockSPB || s.typ == blockPB:
		s.clean = false
	case s.clean:
		// Interface or statistics blocks after a complete batch: kept.
		s.end = s.off
	}
	if s.anywhere {
		s.boundary(s.off)
	}
}

// boundary tells the scanner that the stream can be cut at offset pos
// (in the file), which is where the decompressed stream written so far
// ends. If that is between blocks, after a mark (see end), it becomes
// the cut point and the marks seen before it count.
func (s *blockScanner) boundary(pos int64) {
	if s.stopped || s.st != stHead || s.bn != 0 || s.end == 0 || s.end != s.off || pos <= s.cutOff {
		return
	}
	for id, seq := range s.pending {
		s.marks[id] = max(s.marks[id], seq)
	}
	clear(s.pending)
	moved := s.end > s.cutRaw
	s.cutOff, s.cutRaw = pos, s.end
	if moved && s.onCut != nil {
		s.onCut(s.cutRaw)
	}
}

// markIn returns the batch mark among an EPB's options (which may be
// cut short at maxScanOptions), if any.
func markIn(opts []byte) (id [16]byte, seq uint64, ok bool) {
	for o := 0; o+4 <= len(opts); {
		code := binary.LittleEndian.Uint16(opts[o:])
		l := int(binary.LittleEndian.Uint16(opts[o+2:]))
		if code == 0 || o+4+l > len(opts) {
			break
		}
		v := opts[o+4 : o+4+l]
		if code == pcapfile.OptCustomBinaryNoCopy && l == 4+markSize &&
			binary.LittleEndian.Uint32(v) == markPEN && [4]byte(v[4:8]) == markMagic {
			return [16]byte(v[8:24]), binary.LittleEndian.Uint64(v[24:]), true
		}
		o += 4 + l + (-l & 3)
	}
	return id, 0, false
}
