package layout

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// Batch marks: the last packet of every batch carries a pcapng custom
// option that rewriters must not copy (code 19373), Private Enterprise
// Number 32473 (RFC 5612's number for examples, until pcapsync has its
// own), holding:
//
//	"PSM1" | instance [16] | seq u64 LE
//
// A batch's packets are in a file exactly when its mark is: on start the
// writer cuts every unfinished file back to the end of the last packet
// block carrying a mark (Scan finds it). Wireshark, tshark, capinfos and
// libpcap ignore the option (a custom block would show up as a record in
// tshark).
const (
	MarkPEN  = 32473
	MarkSize = 4 + 16 + 8 // magic, instance, sequence number
)

// MarkMagic starts a mark's payload.
var MarkMagic = [4]byte{'P', 'S', 'M', '1'}

// AppendMark appends to dst the payload of the mark of batch seq of
// instance id (MarkSize bytes): the value of a custom option of
// MarkPEN on the batch's last packet.
func AppendMark(dst []byte, id [16]byte, seq uint64) []byte {
	dst = append(dst, MarkMagic[:]...)
	dst = append(dst, id[:]...)
	return binary.LittleEndian.AppendUint64(dst, seq)
}

// TimeRange is the earliest and latest of a set of packet timestamps
// (Unix ns); OK is false while the set is empty.
type TimeRange struct {
	Min, Max int64
	OK       bool
}

// Add adds ts to the set.
func (t *TimeRange) Add(ts int64) {
	if !t.OK {
		t.Min, t.Max, t.OK = ts, ts, true
		return
	}
	t.Min = min(t.Min, ts)
	t.Max = max(t.Max, ts)
}

// ScanBufSize is the read size of repair: the file is read in chunks of
// this size whatever the codec reads at a time.
const ScanBufSize = 256 << 10

// ScanResult is where an unfinished file can be cut.
type ScanResult struct {
	Marks    map[[16]byte]uint64 // the highest mark per instance before Cut
	Cut      int64               // file offset of the cut; 0 when no mark was found
	Raw      int64               // decompressed offset of the cut
	Complete bool                // the whole file is a complete compressed stream
	Times    TimeRange           // the earliest and latest packet of every whole packet block
}

// scanPart reads a file r written with codec as one stream, in chunks
// of ScanBufSize, decompressing it (gzip: member by member; zstd: block
// by block) into a blockScanner, and returns the last cut point: the
// furthest offset where the compressed stream can end, the decompressed
// stream is at the end of a marked batch (or of blocks after it that
// hold no packets), and every block before is whole. Memory stays
// bounded whatever the sizes of blocks, members or frames. A torn or
// corrupt tail ends the scan without an error; a read error or ctx
// ending is returned, with the cut found so far.
func Scan(ctx context.Context, r io.Reader, codec compress.Codec) (ScanResult, error) {
	return ScanCuts(ctx, r, codec, nil)
}

// ScanCuts is scanPart calling onCut, if set, with the
// decompressed offset of each new cut point as the scan finds it.
func ScanCuts(ctx context.Context, r io.Reader, codec compress.Codec, onCut func(raw int64)) (ScanResult, error) {
	cr := &countingReader{r: r}
	// The decompressors read from the bufio.Reader itself (flate has a
	// fast path for it, and zstd reads exactly what it decodes), so the
	// file offset they reached is what cr read minus what is buffered.
	br := bufio.NewReaderSize(cr, ScanBufSize)
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
		dec, derr := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(index.MaxZstdWindow))
		if derr != nil {
			return ScanResult{}, derr
		}
		defer dec.Close()
		w.afterWrite = func() { sc.boundary(pos()) }
		_, err = dec.WriteTo(w)
	}
	res := ScanResult{Marks: sc.marks, Cut: sc.cutOff, Raw: sc.cutRaw, Complete: err == nil || err == io.EOF, Times: sc.times}
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
	blockIDB = 1
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
	stIDB                      // an interface description's body, read up to maxScanOptions
	stIDBSkip                  // the rest of it, skipped
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

	ts    int64     // the time of the packet block being read, in ns
	times TimeRange // of every whole packet block
	// idb: the body of the interface description being read; convs:
	// how the packets of each interface of the section read their
	// times (if_tsresol 9, as the store writes, unless a file under the
	// root says otherwise).
	idb   []byte
	convs []pcapfile.TimeConv

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
		case stIDB:
			s.idb = append(s.idb, p[:k]...)
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
			case s.typ == blockIDB:
				s.idb = s.idb[:0]
				s.st, s.need = stIDB, min(s.blen-12, maxScanOptions)
			default:
				s.st, s.need = stBody, s.blen-12
			}
		case stFixed:
			raw := uint64(le.Uint32(s.buf[12:]))<<32 | uint64(le.Uint32(s.buf[16:]))
			s.ts = int64(raw)
			if i := le.Uint32(s.buf[8:]); int64(i) < int64(len(s.convs)) {
				s.ts = s.convs[i].Ns(raw)
			}
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
		case stIDB:
			s.st, s.need = stIDBSkip, s.blen-12-int64(len(s.idb))
		case stOptSkip, stBody, stIDBSkip:
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
	switch s.typ {
	case blockSHB:
		s.convs = s.convs[:0] // a new section describes its interfaces anew
	case blockIDB:
		tc, ok := pcapfile.TimeConv{}, false
		if len(s.idb) >= 8 && int64(len(s.idb)) == s.blen-12 {
			tc, ok = pcapfile.IDBTimeConv(s.idb[8:], binary.LittleEndian)
		}
		if !ok {
			tc = pcapfile.NanoTimeConv()
		}
		s.convs = append(s.convs, tc)
	}
	switch {
	case s.typ == blockEPB:
		s.times.Add(s.ts)
		if id, seq, ok := MarkIn(s.opts); ok {
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
func MarkIn(opts []byte) (id [16]byte, seq uint64, ok bool) {
	for o := 0; o+4 <= len(opts); {
		code := binary.LittleEndian.Uint16(opts[o:])
		l := int(binary.LittleEndian.Uint16(opts[o+2:]))
		if code == 0 || o+4+l > len(opts) {
			break
		}
		v := opts[o+4 : o+4+l]
		if code == pcapfile.OptCustomBinaryNoCopy && l == 4+MarkSize &&
			binary.LittleEndian.Uint32(v) == MarkPEN && [4]byte(v[4:8]) == MarkMagic {
			return [16]byte(v[8:24]), binary.LittleEndian.Uint64(v[24:]), true
		}
		o += 4 + l + (-l & 3)
	}
	return id, 0, false
}
