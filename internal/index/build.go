package index

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// pcapng blocks the rebuild tells apart, and the batch mark the store
// writes as the custom option of a batch's last packet (see
// internal/store's file.go): the store commits after marks only, so a
// block ends after one, as it does when the store writes the index.
const (
	pngSHB = 0x0A0D0D0A
	pngIDB = 1
	pngEPB = 6
	pngISB = 5

	optCustomNoCopy = 19373
	markPEN         = 32473
	markLen         = 4 + 4 + 16 + 8

	// maxBlock bounds a pcapng block the rebuild reads whole; longer
	// ones are read in part (readLarge).
	maxBlock   = 1 << 20
	largeKeep  = 1024     // data bytes of a larger packet parsed for keys
	maxOptions = 64 << 10 // options of a larger packet read for a mark
	readBuf    = 256 << 10
)

// MaxZstdWindow is the largest zstd window a reader of the output
// root's files accepts (the query, the scan of a .part, repair, this
// package's builder and verifier, the flow reader): the store writes 1
// MiB windows, and RFC 8878 asks every decoder to support 8 MiB (zstd
// levels up to 19 stay within it). A zstd stream declares its window
// and its decoder keeps that much of what it decoded: a planted file of
// a few KiB (zeros, in packets) can declare 512 MiB, the library's
// default limit, and make every reader of it hold that; a stream
// declaring more than this is refused (zstd.ErrWindowSizeExceeded)
// before it is held.
const MaxZstdWindow = 8 << 20

// Build reads the data file at path (plain, gzip or zstd pcapng as the
// store writes it, finished or ".part") and returns its index, with
// blocks of at least blockBytes decoded bytes (0: DefaultBlockBytes)
// ending where the store's commits do: after a batch mark (plain, zstd
// of one frame) or at a gzip member's or zstd frame's end (a zstd file
// of several frames is indexed as CodecZstdFrames). A file the store wrote with a
// commit after every batch gets the index the store wrote live; with
// fewer commits the blocks may end at other points, all of them valid.
// A ".part" file is indexed up to its last whole pcapng block, without
// an end record. The packets' times are read as pcapfile reads them
// (the interface's if_tsresol and if_tsoffset: the store writes
// nanoseconds, a file of another resolution under the root is indexed
// in nanoseconds all the same).
func Build(ctx context.Context, path string, blockBytes int) ([]byte, error) {
	return BuildFunc(ctx, path, blockBytes, nil)
}

// PacketFunc receives a packet read by BuildFunc: on file interface
// iface of link type linkType, at ts (Unix ns), origLen bytes on the
// wire, capLen captured, data its first bytes (all of them unless the
// packet's block is over 1 MiB: then 1 KiB), in block block of the
// index built (its number among the index's blocks). data is valid
// only during the call.
type PacketFunc func(iface, linkType uint32, ts int64, origLen, capLen uint32, data []byte, block int)

// BuildFunc is Build that also hands every packet it indexes to each
// (nil: none), in file order, so that what else is built from the
// packets (flow records) has the block numbers of the index returned.
func BuildFunc(ctx context.Context, path string, blockBytes int, each PacketFunc) ([]byte, error) {
	if blockBytes <= 0 {
		blockBytes = DefaultBlockBytes
	}
	f, err := safefs.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	codec := CodecOf(path)
	rb := &rebuild{ctx: ctx, codec: codec, blockBytes: int64(blockBytes), statsAt: -1, each: each,
		name: filepath.Base(strings.TrimSuffix(path, partSuffix))}
	cr := &countReader{r: f}
	br := bufio.NewReaderSize(cr, readBuf)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	switch codec {
	case CodecNone:
		err = rb.stream(br, 0)
	case CodecGzip:
		var zr gzip.Reader
		db := bufio.NewReaderSize(nil, readBuf)
		for {
			start := pos()
			if err = zr.Reset(br); err != nil {
				if err == io.EOF {
					err = nil
				}
				break
			}
			zr.Multistream(false)
			db.Reset(&zr)
			if err = rb.stream(db, start); err != nil {
				break
			}
			rb.boundary(pos())
		}
	case CodecZstd:
		var starts []int64
		var whole bool
		if starts, whole, err = ZstdFrames(f, st.Size()); err != nil {
			break
		}
		dec, derr := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(MaxZstdWindow))
		if derr != nil {
			return nil, derr
		}
		defer dec.Close()
		if len(starts) <= 1 {
			// One frame (ZstdFramePerFile): decoded from the start,
			// blocks ending after marks.
			if err = dec.Reset(br); err == nil {
				err = rb.stream(bufio.NewReaderSize(dec, readBuf), 0)
			}
			break
		}
		// A frame per block: each frame decoded on its own, blocks
		// ending at frames' ends, as with gzip's members.
		rb.codec = CodecZstdFrames
		db := bufio.NewReaderSize(nil, readBuf)
		for i, start := range starts {
			end := st.Size()
			if i+1 < len(starts) {
				end = starts[i+1]
			}
			br.Reset(io.NewSectionReader(f, start, end-start))
			if err = dec.Reset(br); err != nil {
				break
			}
			db.Reset(dec)
			if err = rb.stream(db, start); err != nil {
				break
			}
			if i+1 < len(starts) || whole {
				rb.boundary(end)
			}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("indexing %s: %w", path, err)
	}
	if !rb.started {
		rb.begin(0)
	}
	if strings.HasSuffix(path, partSuffix) {
		rb.b.EndBlock(rb.raw, rb.ifaces, 0)
	} else {
		end := rb.raw
		if rb.statsAt >= 0 {
			end = rb.statsAt
		}
		rb.b.Finish(end, rb.ifaces, st.Size(), rb.raw)
	}
	return rb.b.Pending(), nil
}

// rebuild is the state of Build.
type rebuild struct {
	ctx        context.Context
	b          Builder
	codec      Codec
	name       string
	blockBytes int64

	raw       int64               // decoded bytes consumed
	links     []uint32            // link type per interface
	times     []pcapfile.TimeConv // per interface: its packets' times in ns, as pcapfile reads them
	ifaces    int
	started   bool  // the first block began
	memRaw    int64 // decoded offset where the current gzip member starts
	memSeek   int64 // its file offset
	memIfaces int   // interfaces described before it
	marked    bool  // the last pcapng block was a marked packet
	statsAt   int64 // decoded offset of the first statistics block; -1: none
	buf       []byte
	each      PacketFunc
	largeCap  uint32 // the captured length of the packet readLarge read last
}

// begin starts the first block at decoded offset raw.
func (rb *rebuild) begin(raw int64) {
	head, seek := rb.ifaces, raw
	switch rb.codec {
	case CodecGzip, CodecZstdFrames:
		head, seek, raw = rb.memIfaces, rb.memSeek, rb.memRaw
	case CodecZstd:
		seek = 0
	}
	rb.b.Reset(rb.name, rb.codec, head, int(rb.blockBytes), seek, raw)
	rb.started = true
}

// boundary is a point where a decoder can start (a gzip member's or
// zstd frame's end, at file offset seek), after the block read last.
func (rb *rebuild) boundary(seek int64) {
	rb.memRaw, rb.memSeek, rb.memIfaces = rb.raw, seek, rb.ifaces
	if rb.started && rb.raw-rb.b.BlockRaw() >= rb.blockBytes {
		rb.b.EndBlock(rb.raw, rb.ifaces, seek)
	}
}

// stream reads whole pcapng blocks from r, a decoded stream whose first
// byte is at file offset seek (gzip: a member's start), to its end.
func (rb *rebuild) stream(r *bufio.Reader, seek int64) error {
	le := binary.LittleEndian
	var hdr [8]byte
	for {
		if err := rb.ctx.Err(); err != nil {
			return err
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil
			}
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return nil // a torn tail: indexed up to the last whole block
			}
			return err
		}
		typ, n := le.Uint32(hdr[:]), int64(le.Uint32(hdr[4:]))
		if n < 12 || n%4 != 0 || rb.raw == 0 && typ != pngSHB {
			return fmt.Errorf("block at decoded offset %d: not a pcapng block of the store", rb.raw)
		}
		var body []byte
		var err error
		if n <= maxBlock {
			body, err = rb.readWhole(r, n)
		} else {
			body, err = rb.readLarge(r, typ, n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil // a torn tail: indexed up to the last whole block
		}
		if err != nil {
			return fmt.Errorf("block at decoded offset %d: %w", rb.raw, err)
		}
		at := rb.raw
		if !rb.started && typ != pngSHB && typ != pngIDB {
			rb.begin(at)
		}
		rb.raw += n
		rb.marked = false
		switch typ {
		case pngIDB:
			if len(body) < 8 {
				return fmt.Errorf("interface block at decoded offset %d: too short", at)
			}
			tc, ok := pcapfile.IDBTimeConv(body[8:], le)
			if !ok {
				return fmt.Errorf("interface block at decoded offset %d: malformed time options", at)
			}
			rb.links = append(rb.links, uint32(le.Uint16(body)))
			rb.times = append(rb.times, tc)
			rb.ifaces++
		case pngEPB:
			if len(body) < 20 {
				return fmt.Errorf("packet block at decoded offset %d: too short", at)
			}
			ifc := le.Uint32(body)
			capLen := int64(le.Uint32(body[12:]))
			if capLen > int64(len(body)-20) || int(ifc) >= len(rb.links) {
				return fmt.Errorf("packet block at decoded offset %d: bad length or interface", at)
			}
			ts := rb.times[ifc].Ns(uint64(le.Uint32(body[4:]))<<32 | uint64(le.Uint32(body[8:])))
			if rb.each != nil {
				full := uint32(capLen)
				if n > maxBlock {
					full = rb.largeCap
				}
				rb.each(ifc, rb.links[ifc], ts, le.Uint32(body[16:]), full, body[20:20+capLen], rb.b.Blocks())
			}
			rb.b.Add(rb.links[ifc], ts, body[20:20+capLen])
			rb.marked = hasMark(body[20+capLen+(-capLen&3):])
			if rb.marked && !rb.codec.Framed() && rb.raw-rb.b.BlockRaw() >= rb.blockBytes {
				next := rb.raw
				if rb.codec == CodecZstd {
					next = 0
				}
				rb.b.EndBlock(rb.raw, rb.ifaces, next)
			}
		case pngISB:
			if rb.statsAt < 0 {
				rb.statsAt = at
			}
		}
	}
}

var errTrailer = errors.New("trailing length differs")

// readWhole reads the rest of a block of n bytes whose header was read,
// and returns its body (without the trailing length).
func (rb *rebuild) readWhole(r *bufio.Reader, n int64) ([]byte, error) {
	if cap(rb.buf) < int(n) {
		rb.buf = make([]byte, n)
	}
	body := rb.buf[:n-8]
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	if int64(binary.LittleEndian.Uint32(body[len(body)-4:])) != n {
		return nil, errTrailer
	}
	return body[:len(body)-4], nil
}

// readLarge reads the rest of a block of n bytes, more than maxBlock
// (a packet of a link type allowed up to 128 MiB), in bounded memory,
// and returns what the index needs of its body: of a packet block the
// fixed fields, the first largeKeep bytes of data (the captured length
// field says so) and the options (up to maxOptions), of another block
// its first 20 bytes.
func (rb *rebuild) readLarge(r *bufio.Reader, typ uint32, n int64) ([]byte, error) {
	le := binary.LittleEndian
	rest := n - 12 // body bytes
	if cap(rb.buf) < largeKeep+maxOptions+20 {
		rb.buf = make([]byte, largeKeep+maxOptions+20)
	}
	head := rb.buf[:20]
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	body := head
	skip := rest - 20
	if typ == pngEPB {
		capLen := int64(le.Uint32(head[12:]))
		data := capLen + (-capLen & 3)
		opts := rest - 20 - data
		if opts < 0 {
			return nil, errors.New("captured length beyond the block")
		}
		keep := min(capLen, largeKeep)
		if _, err := io.ReadFull(r, rb.buf[20:20+keep]); err != nil {
			return nil, err
		}
		if _, err := r.Discard(int(data - keep)); err != nil {
			return nil, err
		}
		rb.largeCap = uint32(capLen)
		le.PutUint32(rb.buf[12:], uint32(keep))
		body = rb.buf[:20+keep+(-keep&3)]
		skip = opts
		if opts <= maxOptions {
			o := rb.buf[len(body) : len(body)+int(opts)]
			if _, err := io.ReadFull(r, o); err != nil {
				return nil, err
			}
			body, skip = rb.buf[:len(body)+int(opts)], 0
		}
	}
	if _, err := r.Discard(int(skip)); err != nil {
		return nil, err
	}
	var tr [4]byte
	if _, err := io.ReadFull(r, tr[:]); err != nil {
		return nil, err
	}
	if int64(le.Uint32(tr[:])) != n {
		return nil, errTrailer
	}
	return body, nil
}

// hasMark reports whether a packet block's options hold a batch mark.
func hasMark(opts []byte) bool {
	le := binary.LittleEndian
	for o := 0; o+4 <= len(opts); {
		code, l := le.Uint16(opts[o:]), int(le.Uint16(opts[o+2:]))
		if code == 0 || o+4+l > len(opts) {
			return false
		}
		if code == optCustomNoCopy && l == markLen && le.Uint32(opts[o+4:]) == markPEN && string(opts[o+8:o+12]) == "PSM1" {
			return true
		}
		o += 4 + l + (-l & 3)
	}
	return false
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// WriteFile writes the index b of the data file at dataPath to its
// place (Path), through a temporary file renamed over it, so a reader
// sees the old index or the new one. The temporary file has a fresh
// name (tempName) and is created exclusively (safefs.CreateExcl): a
// name planted in advance, link or not, is never written through.
// Renaming replaces whatever has the index's name, a link or a FIFO
// included, without following it.
func WriteFile(dataPath string, b []byte) error {
	return writeIn(filepath.Dir(dataPath), filepath.Base(dataPath), b)
}

// writeIn is WriteFile for the data file rel below root, whose
// directories below root must not be links when the temporary file is
// created (safefs.OpenIn).
func writeIn(root, rel string, b []byte) error {
	var f *os.File
	var tmp string
	var err error
	for range 8 {
		tmp = tempName(rel)
		f, err = safefs.OpenIn(root, tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return err
	}
	tmp = filepath.Join(root, tmp)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, Path(filepath.Join(root, rel)))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// tempSuffix ends the names of WriteFile's temporary files:
// <data file>.idx.<16 hex digits>.tmp.
const tempSuffix = ".tmp"

// tempName returns a fresh name for a temporary file of the index of
// the data file at dataPath: its index's path, a random part and
// ".tmp".
func tempName(dataPath string) string {
	var r [8]byte
	rand.Read(r[:])
	return Path(dataPath) + "." + hex.EncodeToString(r[:]) + tempSuffix
}

// isTempName reports whether name (no directory) is one tempName makes
// for a data file, or the fixed name that versions before it used
// (<data file>.idx.tmp).
func isTempName(name string) bool {
	stem, ok := strings.CutSuffix(name, Suffix+tempSuffix)
	if !ok {
		rest, ok := strings.CutSuffix(name, tempSuffix)
		if !ok || len(rest) < 17 || rest[len(rest)-17] != '.' {
			return false
		}
		if _, err := hex.DecodeString(rest[len(rest)-16:]); err != nil {
			return false
		}
		if stem, ok = strings.CutSuffix(rest[:len(rest)-17], Suffix); !ok {
			return false
		}
	}
	return isData(stem)
}
