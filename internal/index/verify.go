package index

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// What Verify reads of a data file: the head (for the interfaces' link
// types) if it is no longer than probeHead decoded bytes, and of each
// block probed its first pcapng blocks, up to its first packet and at
// most probeBytes decoded bytes; a packet's first probeData bytes (the
// deepest IPv6 extension headers packetKeys walks fit); a compressed
// file through a buffer of probeBuf bytes.
const (
	probeHead  = 4 << 20
	probeBytes = 256 << 10
	probeData  = 64 << 10
	probeBuf   = 512
)

// Verify checks ix against its data file, r of size bytes, by reading
// a little of its blocks, and returns the bytes of r it read: the
// decoded stream at a block's Raw (its decoder started at Seek) must
// hold whole pcapng blocks, and no section header, up to its first
// packet; a block claims packets exactly when one is found there before
// RawEnd; that packet must be on an interface described before the
// block's end, at a time within the block's First..Last, and every key
// the index would take of it must be in the block's filter. The head
// must describe HeadIfaces interfaces. It fails with an error wrapping
// ErrMismatch when the data disagree: an index of another file, or one
// whose times, filters or offsets were changed, is refused this way
// unless the changes leave every probed block's first packet alone.
//
// Every block of a plain file is probed: a read of its first packet,
// at its offset. A decoder yields nothing before it has decoded a
// whole deflate block or zstd block (up to 32 or 128 KiB decoded), so
// of a gzip file or a zstd file of a frame per block only the first
// and last blocks are probed, and of a zstd file of one frame, which is
// decoded from its start, only the first; the other blocks of a gzip
// file or a zstd file of a frame per block must start where a member or
// frame does (its magic number at Seek). Verify allocates a decoder and
// a few KiB; it is safe to call concurrently.
func (ix *Index) Verify(r io.ReaderAt, size int64) (read int64, err error) {
	if ix.Summary {
		return 0, mismatch("a summary has no filters to verify")
	}
	if len(ix.All) == 0 {
		return 0, nil
	}
	cr := &countReaderAt{r: r}
	// A plain file is read through the smallest buffer: what a probe
	// reads is a packet block's header and its first bytes.
	p := &prober{ix: ix, r: cr, size: size, br: bufio.NewReaderSize(nil, 16), zr: bufio.NewReaderSize(nil, probeBuf)}
	defer p.close()
	if err := p.head(); err != nil {
		return cr.n, fmt.Errorf("head: %w", err)
	}
	prev, last := ix.HeadIfaces, len(ix.All)-1
	for i := range ix.All {
		probe := true
		switch ix.Codec {
		case CodecGzip, CodecZstdFrames:
			probe = i == 0 || i == last
		case CodecZstd:
			probe = i == 0
		}
		var err error
		switch {
		case probe:
			err = p.block(&ix.All[i], prev)
		case ix.Codec.Framed():
			err = p.frameStart(ix.All[i].Seek)
		}
		if err != nil {
			return cr.n, fmt.Errorf("block %d at offset %d: %w", i, ix.All[i].Seek, err)
		}
		prev = ix.All[i].Ifaces
	}
	return cr.n, nil
}

// countReaderAt counts the bytes read through it.
type countReaderAt struct {
	r io.ReaderAt
	n int64
}

func (c *countReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

type prober struct {
	ix    *Index
	r     io.ReaderAt
	size  int64
	br    *bufio.Reader // the decoded stream
	zr    *bufio.Reader // the data file, for a decoder
	gz    *gzip.Reader
	zd    *zstd.Decoder
	pos   int64               // decoded offset of br's next byte
	links []uint32            // link type per interface, as far as known
	times []pcapfile.TimeConv // and how its packets' times read
	set   keySet
	buf   []byte
}

func (p *prober) close() {
	if p.zd != nil {
		p.zd.Close()
	}
}

func mismatch(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, ErrMismatch)...)
}

// open starts reading the decoded stream at data file offset seek,
// discarding its first skip bytes.
func (p *prober) open(seek, skip int64) error {
	sr := io.NewSectionReader(p.r, seek, p.size-seek)
	switch p.ix.Codec {
	case CodecNone:
		p.br.Reset(sr)
	case CodecGzip:
		p.zr.Reset(sr)
		if p.gz == nil {
			p.gz = new(gzip.Reader)
		}
		if err := p.gz.Reset(p.zr); err != nil {
			return mismatch("no gzip member: %v", err)
		}
		p.br.Reset(p.gz)
	case CodecZstd, CodecZstdFrames:
		if p.zd == nil {
			d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(MaxZstdWindow))
			if err != nil {
				return err
			}
			p.zd = d
		}
		p.zr.Reset(sr)
		if err := p.zd.Reset(p.zr); err != nil {
			return mismatch("no zstd frame: %v", err)
		}
		p.br.Reset(p.zd)
	}
	p.pos = 0
	return p.skip(skip)
}

// skip discards the next n decoded bytes.
func (p *prober) skip(n int64) error {
	if _, err := p.br.Discard(int(n)); err != nil {
		return mismatch("decoding to offset %d: %v", p.pos+n, err)
	}
	p.pos += n
	return nil
}

// next reads the next pcapng block of at most room bytes: its type, its
// length and the first probeData bytes of its body.
// A section header is refused unless shb.
func (p *prober) next(room int64, shb bool) (typ uint32, n int64, body []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(p.br, hdr[:]); err != nil {
		return 0, 0, nil, mismatch("reading a pcapng block: %v", err)
	}
	le := binary.LittleEndian
	typ, n = le.Uint32(hdr[:]), int64(le.Uint32(hdr[4:]))
	if n < 12 || n%4 != 0 || n > room || (typ == pngSHB) != shb {
		return 0, 0, nil, mismatch("no pcapng block of the store (type %#x, %d bytes)", typ, n)
	}
	keep := min(n-12, probeData)
	if int64(cap(p.buf)) < keep {
		p.buf = make([]byte, keep)
	}
	body = p.buf[:keep]
	if _, err := io.ReadFull(p.br, body); err != nil {
		return 0, 0, nil, mismatch("reading a pcapng block: %v", err)
	}
	if err := p.skip(n - 12 - keep); err != nil {
		return 0, 0, nil, err
	}
	var tr [4]byte
	if _, err := io.ReadFull(p.br, tr[:]); err != nil {
		return 0, 0, nil, mismatch("reading a pcapng block: %v", err)
	}
	if int64(le.Uint32(tr[:])) != n {
		return 0, 0, nil, mismatch("pcapng block of %d bytes: %v", n, errTrailer)
	}
	p.pos += 12 + keep
	return typ, n, body, nil
}

// head reads the data file's head, if short enough, for the link types
// of the interfaces it describes.
func (p *prober) head() error {
	end := p.ix.HeadEnd()
	if end > probeHead && p.ix.Codec != CodecZstd {
		return nil
	}
	if err := p.open(0, 0); err != nil {
		return err
	}
	for at := int64(0); at < end; {
		typ, n, body, err := p.next(end-at, at == 0)
		if err != nil {
			return err
		}
		if typ == pngIDB && len(body) >= 2 {
			p.iface(body)
		}
		at += n
	}
	if len(p.links) != p.ix.HeadIfaces {
		return mismatch("%d interfaces described, the index says %d", len(p.links), p.ix.HeadIfaces)
	}
	return nil
}

// frameStart checks that a gzip member or zstd frame starts at seek:
// the first bytes of a gzip header (magic, deflate) or a zstd frame's
// magic number.
func (p *prober) frameStart(seek int64) error {
	var b [4]byte
	if _, err := p.r.ReadAt(b[:], seek); err != nil {
		return mismatch("reading offset %d: %v", seek, err)
	}
	ok := b[0] == 0x1f && b[1] == 0x8b && b[2] == 8
	if p.ix.Codec == CodecZstdFrames {
		ok = binary.LittleEndian.Uint32(b[:]) == zstdMagic
	}
	if !ok {
		return mismatch("no gzip member or zstd frame starts at offset %d", seek)
	}
	return nil
}

// block probes b, whose interfaces are numbered from ifc on.
func (p *prober) block(b *Block, ifc int) error {
	seekRaw := b.Raw
	if p.ix.Codec.Framed() && b.Seek == 0 {
		seekRaw = 0
	}
	var err error
	switch {
	case p.ix.Codec == CodecZstd && p.pos <= b.Raw:
		err = p.skip(b.Raw - p.pos) // on from where the last probe stopped
	case p.ix.Codec == CodecZstd:
		err = mismatch("block at decoded offset %d, before %d", b.Raw, p.pos)
	default:
		err = p.open(b.Seek, b.Raw-seekRaw)
	}
	if err != nil {
		return err
	}
	room := b.RawEnd - b.Raw
	for at := int64(0); at < room; {
		if at >= probeBytes {
			return nil // no packet found early: not judged
		}
		typ, n, body, err := p.next(room-at, false)
		if err != nil {
			return err
		}
		at += n
		switch {
		case typ == pngIDB && len(body) >= 2:
			if ifc == len(p.links) {
				p.iface(body)
			}
			ifc++
		case typ == pngEPB:
			return p.packet(b, body)
		}
	}
	if b.Packets > 0 {
		return mismatch("%d packets claimed, none found", b.Packets)
	}
	return nil
}

// iface notes the interface an interface description block's body
// describes: its link type and how its packets' times read (as the
// builder and pcapfile read them; options it cannot read: nanoseconds).
func (p *prober) iface(body []byte) {
	p.links = append(p.links, uint32(binary.LittleEndian.Uint16(body)))
	tc, ok := pcapfile.IDBTimeConv(body[min(8, len(body)):], binary.LittleEndian)
	if !ok {
		tc = pcapfile.NanoTimeConv()
	}
	p.times = append(p.times, tc)
}

// packet checks a block's first packet, body the start of its packet
// block's body.
func (p *prober) packet(b *Block, body []byte) error {
	le := binary.LittleEndian
	if b.Packets == 0 {
		return mismatch("a packet in a block claiming none")
	}
	if len(body) < 20 {
		return mismatch("packet block too short")
	}
	ifc := int64(le.Uint32(body))
	raw := uint64(le.Uint32(body[4:]))<<32 | uint64(le.Uint32(body[8:]))
	ts := int64(raw) // an interface not read here: nanoseconds, as the store writes
	if ifc < int64(len(p.times)) {
		ts = p.times[ifc].Ns(raw)
	}
	if ifc >= int64(b.Ifaces) {
		return mismatch("packet on interface %d, %d described", ifc, b.Ifaces)
	}
	if ts < b.First || ts > b.Last {
		return mismatch("packet at %d, the block claims %d to %d", ts, b.First, b.Last)
	}
	if !p.ix.KeysWide() || ifc >= int64(len(p.links)) {
		return nil // filters not asked for keys, or the link type unknown: time only
	}
	data := body[20:]
	data = data[:min(int64(len(data)), int64(le.Uint32(body[12:])))]
	p.set.reset()
	packetKeys(&p.set, p.links[ifc], data)
	if p.set.wild && !saturated(b.filter) {
		return mismatch("a packet of a link type not keyed in a block whose filter is not full")
	}
	pr := probes(len(b.filter), b.Keys)
	for _, k := range p.set.slots {
		if k != 0 && !bloomHas(b.filter, k, pr) {
			return mismatch("a key of its first packet is not in its filter")
		}
	}
	return nil
}

// saturated reports whether the filter f has every bit set (and so
// matches every key).
func saturated(f []uint64) bool {
	for _, w := range f {
		if w != ^uint64(0) {
			return false
		}
	}
	return len(f) > 0
}
