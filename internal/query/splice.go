package query

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// seg is a range of a data file's decoded stream to read: a decoder
// starts at file offset seek (its decoded stream there at offset
// seekRaw) and reads no data file bytes from seekEnd on (-1: the end of
// the file); the decoded bytes before raw are discarded, those of [raw,
// rawEnd) read (rawEnd -1: to the end of the stream).
type seg struct {
	seek, seekRaw, seekEnd int64
	raw, rawEnd            int64
}

// splice is the decoded stream of a data file restricted to its
// segments, concatenated: what a pcapng reader reads as one stream when
// the segments are the head and whole pcapng blocks. It counts the data
// file bytes it reads (n). After the first segment (the head) it calls
// plan once, with the head's bytes, for the segments that follow.
type splice struct {
	f     *os.File
	codec index.Codec
	segs  []seg
	i     int   // segment being read
	at    bool  // the decoder is positioned in segs[i]
	pos   int64 // decoded offset of the decoder's next byte
	cur   io.Reader
	n     int64 // data file bytes read
	cr    countReader
	k     *kit               // the buffers and decoders, the stream's
	src   io.Reader          // k.br or k.tr: what the decoder reads
	sec   int64              // where the decoder's file section ends; -1: the file's end
	head  []byte             // the head's bytes, while plan is pending
	plan  func([]byte) []seg // nil once called
	// members: read a gzip file member by member, starting the next
	// one only when more is wanted (a file being written may not hold
	// it yet, and a gzip reader's end of stream is final).
	members bool
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n *int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	*c.n += int64(n)
	return n, err
}

// maxHead bounds the head splice keeps for plan; a longer head gets
// plan(nil).
const maxHead = 64 << 10

// spliceBuf is the buffer under the decoders.
const spliceBuf = 64 << 10

func newSplice(f *os.File, k *kit, codec index.Codec, segs []seg, plan func([]byte) []seg) *splice {
	s := &splice{f: f, k: k, codec: codec, segs: segs, plan: plan}
	s.cr.n = &s.n
	return s
}

// kit is what a stream reads its files with, kept from one file to the
// next, so that a query over many files makes no garbage per file (and
// its memory stays what it holds): the buffer under the decoders, the
// decoders, and the pcapng reader's buffer. Made as needed; one file
// at a time uses it.
type kit struct {
	br *bufio.Reader
	tr *tailReader // instead of br for a file read member by member
	gz *gzip.Reader
	zd *zstd.Decoder
	// ahead, if not nil: read a file's decoded stream ahead (ahead.go)
	// with these buffers; a file opened to be followed is not.
	ahead *aheadKit
	// plainDirect: a plain file is read by the reader itself, not ahead:
	// its reader runs in a producer of its own (produce.go), beside the
	// merge already, and reading ahead would only copy its bytes once
	// more; compressed files are still decompressed ahead.
	plainDirect bool
	// refill gives the readers their buffers (ReaderConfig.Refill): the
	// stream's chunks, kept from one file to the next.
	refill func(int) []byte
}

// readerConfig is the configuration of a file's pcapfile.Reader.
func (k *kit) readerConfig(onStats func(int, pcapfile.InterfaceStats)) *pcapfile.ReaderConfig {
	return &pcapfile.ReaderConfig{OnStats: onStats, Refill: k.refill}
}

// close frees what the kit holds beyond memory (the zstd decoder).
func (k *kit) close() {
	if k.zd != nil {
		k.zd.Close()
		k.zd = nil
	}
}

// sniff returns the codec of the data file f by its first bytes, as
// pcapfile.Open does (whatever its name).
func sniff(f *os.File) index.Codec {
	var m [4]byte
	n, _ := f.ReadAt(m[:], 0)
	switch {
	case n >= 2 && m[0] == 0x1f && m[1] == 0x8b:
		return index.CodecGzip
	case n == 4 && m == [4]byte{0x28, 0xb5, 0x2f, 0xfd}:
		return index.CodecZstd
	}
	return index.CodecNone
}

func (s *splice) Read(p []byte) (int, error) {
	for s.i < len(s.segs) {
		g := &s.segs[s.i]
		if !s.at {
			if err := s.position(g); err != nil {
				return 0, err
			}
			s.at = true
		}
		want := int64(len(p))
		if g.rawEnd >= 0 {
			want = min(want, g.rawEnd-s.pos)
		}
		if want <= 0 {
			s.nextSeg()
			continue
		}
		n, err := s.cur.Read(p[:want])
		if s.plan != nil && s.i == 0 && len(s.head)+n <= maxHead {
			s.head = append(s.head, p[:n]...)
		}
		s.pos += int64(n)
		if err == io.EOF && s.members && s.codec == index.CodecGzip && (g.rawEnd < 0 || s.pos < g.rawEnd) {
			if rerr := s.k.gz.Reset(s.src); rerr == nil {
				s.k.gz.Multistream(false)
				if n > 0 {
					return n, nil
				}
				continue
			}
		}
		if err == io.EOF {
			if g.rawEnd >= 0 && s.pos < g.rawEnd {
				return n, fmt.Errorf("decoded stream ends at %d, before %d: %w", s.pos, g.rawEnd, io.ErrUnexpectedEOF)
			}
			s.nextSeg()
			if n > 0 {
				return n, nil
			}
			continue
		}
		return n, err
	}
	return 0, io.EOF
}

// nextSeg moves on from the segment read to its end.
func (s *splice) nextSeg() {
	if s.plan != nil && s.i == 0 {
		head := s.head
		if s.pos > maxHead {
			head = nil
		}
		s.segs = append(s.segs[:1], s.plan(head)...)
		s.plan, s.head = nil, nil
	}
	s.i++
	s.at = false
}

// position readies the decoder to read g from g.raw: on from where it
// is when it can (zstd of one frame always: the file is one frame;
// others when g follows and the file section read covers it), else
// from g.seek.
func (s *splice) position(g *seg) error {
	covers := s.sec < 0 || g.seekEnd >= 0 && g.seekEnd <= s.sec
	if s.cur == nil || s.pos > g.raw || s.codec.Seekable() && (g.raw != s.pos || !covers) {
		if err := s.open(g); err != nil {
			return err
		}
	}
	if d := g.raw - s.pos; d > 0 {
		var err error
		if s.codec == index.CodecNone && !s.members {
			_, err = s.k.br.Discard(int(d))
		} else {
			_, err = io.CopyN(io.Discard, s.cur, d)
		}
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fmt.Errorf("skipping to decoded offset %d: %w", g.raw, err)
		}
		s.pos = g.raw
	}
	return nil
}

// open starts a decoder at g.seek.
func (s *splice) open(g *seg) error {
	s.sec = g.seekEnd
	end := g.seekEnd
	if end < 0 {
		end = math.MaxInt64
	}
	s.cr.r = io.NewSectionReader(s.f, g.seek, end-g.seek)
	k := s.k
	switch {
	case s.members:
		if k.tr == nil {
			k.tr = &tailReader{buf: make([]byte, spliceBuf)}
		}
		k.tr.reset(&s.cr)
		s.src = k.tr
	case k.br == nil:
		k.br = bufio.NewReaderSize(&s.cr, spliceBuf)
		s.src = k.br
	default:
		k.br.Reset(&s.cr)
		s.src = k.br
	}
	s.pos = g.seekRaw
	switch s.codec {
	case index.CodecNone:
		s.cur = s.src
	case index.CodecGzip:
		if k.gz == nil {
			k.gz = new(gzip.Reader)
		}
		if err := k.gz.Reset(s.src); err != nil {
			return fmt.Errorf("gzip at offset %d: %w", g.seek, err)
		}
		k.gz.Multistream(!s.members)
		s.cur = k.gz
	case index.CodecZstd, index.CodecZstdFrames:
		if k.zd == nil {
			zd, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(index.MaxZstdWindow))
			if err != nil {
				return err
			}
			k.zd = zd
		}
		if err := k.zd.Reset(s.src); err != nil {
			return fmt.Errorf("zstd: %w", err)
		}
		s.cur = k.zd
	}
	return nil
}

// grow moves the end of the last segment to rawEnd (a followed file's
// new limit), so that Read goes on from where it stopped.
func (s *splice) grow(rawEnd int64) {
	n := len(s.segs) - 1
	s.segs[n].rawEnd = rawEnd
	if s.i > n {
		s.i, s.at = n, s.cur != nil
	}
}

// tailReader is a buffered reader (with ReadByte, so that gzip reads
// through it without buffering of its own) of a file being written: an
// end of file is reported only when nothing is buffered and is not
// kept, so a read after the file grew goes on; bufio.Reader reports an
// end met while filling at the next read, which a decoder takes as a
// truncated stream.
type tailReader struct {
	r    io.Reader
	buf  []byte
	i, n int
}

func (t *tailReader) reset(r io.Reader) { t.r, t.i, t.n = r, 0, 0 }

func (t *tailReader) fill() error {
	n, err := t.r.Read(t.buf)
	t.i, t.n = 0, n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

func (t *tailReader) Read(p []byte) (int, error) {
	if t.i == t.n {
		if err := t.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, t.buf[t.i:t.n])
	t.i += n
	return n, nil
}

func (t *tailReader) ReadByte() (byte, error) {
	if t.i == t.n {
		if err := t.fill(); err != nil {
			return 0, err
		}
	}
	t.i++
	return t.buf[t.i-1], nil
}

// Close closes the file; the kit stays the stream's.
func (s *splice) Close() error {
	s.cur, s.src, s.cr.r = nil, nil, nil
	return s.f.Close()
}

// headLinkTypes returns the link types of the interfaces a data file's
// head (section header and interface descriptions, little-endian as
// the store writes) describes; ok false if it cannot tell.
func headLinkTypes(head []byte) (lts []uint16, ok bool) {
	le := binary.LittleEndian
	if len(head) < 12 || !bytes.Equal(head[8:12], []byte{0x4d, 0x3c, 0x2b, 0x1a}) {
		return nil, false
	}
	for off := 0; off < len(head); {
		if len(head)-off < 12 {
			return nil, false
		}
		typ, n := le.Uint32(head[off:]), int(le.Uint32(head[off+4:]))
		if n < 12 || n > len(head)-off {
			return nil, false
		}
		if typ == 1 {
			if n < 20 {
				return nil, false
			}
			lts = append(lts, le.Uint16(head[off+8:]))
		}
		off += n
	}
	return lts, true
}

// gzipTrailer finds the gzip member of a closed file where the decoded
// bytes after its last block (the statistics blocks) start: the last
// members of the file decode, to its end, to at least the rawSize-from
// bytes from decoded offset from on. It looks for a member header in the
// last bytes of the file and checks each candidate by decoding it (the
// members' CRCs and lengths verify it); ok false if none is found. It
// returns the member's file offset and its decoded offset; n is the
// data file bytes it read.
func gzipTrailer(f *os.File, dataSize, rawSize, from, notBefore int64) (seek, raw, n int64, ok bool) {
	const window = 16 << 10
	lo := max(dataSize-window, notBefore)
	if lo >= dataSize {
		return 0, 0, 0, false
	}
	buf := make([]byte, dataSize-lo)
	m, _ := f.ReadAt(buf, lo)
	n = int64(m)
	buf = buf[:m]
	var zr gzip.Reader
	for i := len(buf) - 18; i >= 0; i-- {
		if buf[i] != 0x1f || buf[i+1] != 0x8b || buf[i+2] != 8 {
			continue
		}
		if zr.Reset(bytes.NewReader(buf[i:])) != nil {
			continue
		}
		d, err := io.Copy(io.Discard, &zr)
		if err != nil || rawSize-d > from {
			continue // not a member, or one after from
		}
		return lo + int64(i), rawSize - d, n, true
	}
	return 0, 0, n, false
}

// zstdTrailer finds the frame of a closed file of a zstd frame per
// block (dataSize bytes, decoding to rawSize) where the decoded bytes
// after its last block, which ends at from and whose frame starts at
// lastSeek, start: the store ends a frame there, before the statistics.
// It checks the frame after the last block's by decoding it and what
// follows to the file's end: exactly rawSize-from bytes. It returns the
// frame's file offset; n is the data file bytes it read; ok false if
// the check fails.
func zstdTrailer(f *os.File, dataSize, rawSize, from, lastSeek int64) (seek, n int64, ok bool) {
	end, n, err := index.ZstdFrameEnd(f, lastSeek, dataSize)
	if err != nil || end >= dataSize {
		return 0, n, false
	}
	cr := countReader{r: io.NewSectionReader(f, end, dataSize-end), n: &n}
	zd, err := zstd.NewReader(&cr, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(index.MaxZstdWindow))
	if err != nil {
		return 0, n, false
	}
	defer zd.Close()
	d, err := io.Copy(io.Discard, zd)
	if err != nil || d != rawSize-from {
		return 0, n, false
	}
	return end, n, true
}
