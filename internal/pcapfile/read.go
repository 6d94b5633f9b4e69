package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

const (
	// DefaultMaxPacket is the captured-length limit used when
	// ReaderConfig.MaxPacket is zero (four times tcpdump's 262144 snaplen).
	DefaultMaxPacket = 262144 * 4

	// BlockSlack is how far a pcapng block the Reader has to parse (SHB,
	// IDB, EPB, SPB, PB) may exceed MaxPacket, to leave room for headers
	// and options. Larger blocks are ErrTooLarge. Blocks the Reader skips
	// (NRB, ISB, DSB, custom, unknown) are streamed past and have no limit.
	BlockSlack = 64 << 10

	// ReaderBufferSize is the initial size of the Reader's internal
	// buffer, and the least of a ReaderConfig.Buffer.
	ReaderBufferSize = 256 << 10
	minBufSize       = ReaderBufferSize

	// maxEmptyReads is how many (0, nil) reads in a row the Reader accepts
	// from its source before it gives up with io.ErrNoProgress.
	maxEmptyReads = 100
)

// Classic pcap file header (24 bytes) and record header (16 bytes), in the
// byte order given by the magic:
//
//	 0               1               2               3
//	+---------------+---------------+---------------+---------------+
//	|   magic a1b2c3d4 (µs) or a1b23c4d (ns), file byte order       | 0
//	|        version_major (2)      |       version_minor (4)       | 4
//	|                 thiszone (ignored)                            | 8
//	|                 sigfigs (ignored)                             | 12
//	|                 snaplen                                       | 16
//	|  FCS/flag bits  |   reserved  |         link type             | 20
//	+---------------------------------------------------------------+
//	|                 ts_sec (unsigned)                             | 0
//	|                 ts_usec or ts_nsec                            | 4
//	|                 incl_len (captured length)                    | 8
//	|                 orig_len (length on the wire)                 | 12
//	+---------------------------------------------------------------+
//	|                 incl_len bytes of packet data ...
const (
	magicMicro = 0xa1b2c3d4
	magicNano  = 0xa1b23c4d

	pcapFileHeaderLen   = 24
	pcapRecordHeaderLen = 16
)

// Interface describes one capture interface: a pcapng Interface
// Description Block, or the single implicit interface of a classic pcap
// file.
type Interface struct {
	Name        string // if_name; empty if the file has none
	Description string // if_description
	Comment     string // opt_comment (pcapng only; the first, if several)
	LinkType    uint16 // LINKTYPE_* value
	SnapLen     uint32 // 0 in pcapng means "no limit"
}

// Packet is one captured packet.
type Packet struct {
	// Timestamp is Unix time in nanoseconds. pcapng Simple Packet Blocks
	// carry no timestamp; their packets have Timestamp 0.
	Timestamp int64
	// Interface is an index into Reader.Interfaces(), global across pcapng
	// sections.
	Interface int
	// OrigLen is the packet's length on the wire. The Reader never returns
	// OrigLen < len(Data): a record claiming a smaller original length gets
	// OrigLen = len(Data).
	OrigLen uint32
	// Data holds the captured bytes; len(Data) is the captured length.
	Data []byte
}

// ReaderConfig configures a Reader. The zero value (or a nil pointer) means
// defaults.
type ReaderConfig struct {
	// MaxPacket is the largest captured length accepted; a record or block
	// claiming more is ErrTooLarge, and the Reader never allocates from a
	// claimed length above it. Zero means DefaultMaxPacket.
	MaxPacket uint32
	// OnStats, if set, is called with every Interface Statistics Block
	// read (pcapng only), during the ReadInto call that reads past it:
	// iface indexes Interfaces(), the timestamp is converted like a
	// packet's, the counters present are marked by their Have flags.
	OnStats func(iface int, st InterfaceStats)
	// Buffer, if its length is at least ReaderBufferSize, is the Reader's buffer
	// (a larger one is made should a block need it): a caller reading
	// many files one after the other gives each Reader the same one.
	// It is the Reader's until the Reader is no longer used; the
	// packets ReadInto returns point into it.
	Buffer []byte
	// Refill, if set, is asked for a new buffer of at least n bytes
	// (n at most the largest block accepted) wherever the Reader would
	// move its unread bytes to the front of its buffer or grow it: it
	// copies them into the new one and never writes to the old one
	// again, so the Data of packets already returned stays as it is for
	// as long as the caller keeps that buffer, not only until the next
	// read. Buffer is then the first buffer (Refill is asked for one
	// when it is too short).
	Refill func(n int) []byte
	// MaxInterfaces, if above zero, bounds the interfaces a stream may
	// describe (all its sections together): one more is ErrTooLarge,
	// so a hostile stream cannot grow the Reader's table without end.
	MaxInterfaces int
	// MaxInterfaceBytes, if above zero, bounds the bytes of the
	// interfaces' names, descriptions and comments kept (all sections together):
	// a block beyond it is ErrTooLarge.
	MaxInterfaceBytes int
}

type fileFormat uint8

const (
	formatPcap fileFormat = iota + 1
	formatPcapNG
)

// Reader reads packets from a classic pcap or a pcapng stream. It does its
// own buffering (at least 256 KiB, grown up to what the largest accepted
// block needs), so the source need not be buffered.
//
// A Reader is not safe for concurrent use.
type Reader struct {
	src    io.Reader
	buf    []byte
	r, w   int   // buf[r:w] is buffered and unread
	off    int64 // file offset of buf[r]
	srcErr error // error from src, reported once buffered bytes run out
	err    error // sticky error returned by ReadInto
	refill func(int) []byte
	mapped bool   // buf is NewMappedReader's data: never written
	spare  []byte // ReaderConfig.Buffer, for when a mapped buf runs out

	maxPacket uint32
	maxBlock  int64 // pcapng: largest parsed block
	onStats   func(int, InterfaceStats)
	maxIfaces int
	maxMeta   int // MaxInterfaceBytes
	meta      int // bytes of the names and descriptions kept

	comments []string // opt_comment of the current section's header

	format fileFormat
	be     bool // current byte order is big-endian
	nano   bool

	// classic pcap
	fracMul int64 // ns per unit of the record's fraction field

	// pcapng
	ifaces       []Interface
	ifx          []TimeConv // parallel to ifaces
	sectionBase  int        // global index of the section's first interface
	sectionCount int        // interfaces defined in the current section
}

// NewReader reads the file header of a classic pcap (microsecond or
// nanosecond magic, either byte order) or pcapng (either byte order) stream
// and returns a Reader positioned at the first record. cfg may be nil.
//
// Bad headers are reported as *FormatError with Offset 0: ErrUnknownFormat
// for an unrecognised magic, ErrTruncated for input shorter than the header
// (including empty input), ErrMalformed for an unsupported version.
func NewReader(src io.Reader, cfg *ReaderConfig) (*Reader, error) {
	return newReader(src, nil, cfg)
}

// NewMappedReader is NewReader over a file whose first bytes, data, are
// already in memory that the Reader must not write to (a read-only
// mapping of the file): the packets ReadInto returns point into data
// and nothing of it is copied but a record that runs past its end. rest,
// if not nil, is what follows data (the rest of the file, read with
// read(2): it may have grown since it was mapped); it is read into a
// buffer of the Reader's own (cfg's Buffer or Refill) once data's bytes
// run out.
func NewMappedReader(data []byte, rest io.Reader, cfg *ReaderConfig) (*Reader, error) {
	if data == nil {
		data = []byte{}
	}
	if rest == nil {
		rest = eofReader{}
	}
	return newReader(rest, data, cfg)
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// newReader is NewReader, or NewMappedReader where data is not nil.
func newReader(src io.Reader, data []byte, cfg *ReaderConfig) (*Reader, error) {
	maxPacket := uint32(DefaultMaxPacket)
	if cfg != nil && cfg.MaxPacket != 0 {
		maxPacket = cfg.MaxPacket
	}
	var onStats func(int, InterfaceStats)
	var maxIfaces, maxMeta int
	var buf []byte
	var refill func(int) []byte
	if cfg != nil {
		onStats = cfg.OnStats
		maxIfaces = cfg.MaxInterfaces
		maxMeta = cfg.MaxInterfaceBytes
		refill = cfg.Refill
		if len(cfg.Buffer) >= minBufSize {
			buf = cfg.Buffer
		}
	}
	switch {
	case data != nil:
		buf = data
	case buf != nil:
	case refill != nil:
		if buf = refill(minBufSize); len(buf) < minBufSize {
			return nil, errors.New("pcapfile: ReaderConfig.Refill returned a short buffer")
		}
	default:
		buf = make([]byte, minBufSize)
	}
	r := &Reader{
		onStats:   onStats,
		maxIfaces: maxIfaces,
		maxMeta:   maxMeta,
		src:       src,
		buf:       buf,
		refill:    refill,
		maxPacket: maxPacket,
		maxBlock:  int64(maxPacket) + BlockSlack,
	}
	if data != nil {
		r.w, r.mapped = len(data), true
		if _, ok := src.(eofReader); ok {
			r.srcErr = io.EOF
		}
		if cfg != nil && len(cfg.Buffer) >= minBufSize {
			r.spare = cfg.Buffer
		}
	}
	if err := r.fill(4); err != nil {
		return nil, r.readErr(0, "file header", err)
	}
	m := r.buf[r.r : r.r+4]
	switch {
	case binary.LittleEndian.Uint32(m) == blockSHB:
		r.format = formatPcapNG
		r.nano = true
		if err := r.readSHB(true); err != nil {
			return nil, err
		}
		return r, nil
	case binary.LittleEndian.Uint32(m) == magicMicro:
		r.fracMul = 1000
	case binary.BigEndian.Uint32(m) == magicMicro:
		r.be, r.fracMul = true, 1000
	case binary.LittleEndian.Uint32(m) == magicNano:
		r.nano, r.fracMul = true, 1
	case binary.BigEndian.Uint32(m) == magicNano:
		r.be, r.nano, r.fracMul = true, true, 1
	default:
		return nil, formatErr(0, ErrUnknownFormat, "unrecognised magic number %#08x", binary.BigEndian.Uint32(m))
	}
	r.format = formatPcap
	if err := r.readPcapHeader(); err != nil {
		return nil, err
	}
	return r, nil
}

// readPcapHeader parses the classic file header; the magic is already known.
// It accepts version 2.x (what libpcap writes, 2.4) and rejects the rest.
// thiszone and sigfigs are ignored, as libpcap does. The link type is the
// low 16 bits of the network field; the FCS bits above them are ignored.
func (r *Reader) readPcapHeader() error {
	if err := r.fill(pcapFileHeaderLen); err != nil {
		return r.readErr(0, "pcap file header", err)
	}
	h := r.buf[r.r : r.r+pcapFileHeaderLen]
	major, minor := r.u16(h[4:]), r.u16(h[6:])
	if major != 2 {
		return formatErr(0, ErrMalformed, "unsupported pcap version %d.%d", major, minor)
	}
	ifc := Interface{
		SnapLen:  r.u32(h[16:]),
		LinkType: uint16(r.u32(h[20:])),
	}
	r.ifaces = append(r.ifaces, ifc)
	r.consume(pcapFileHeaderLen)
	return nil
}

// ReadInto reads the next packet into p. p.Data aliases the Reader's
// internal buffer: it is valid only until the next call to ReadInto or
// ReadPacket, and the caller must not retain it beyond that (copy it, or use
// ReadPacket). The steady state allocates nothing.
//
// At a clean end of input ReadInto returns io.EOF (unwrapped). Malformed
// input yields a *FormatError with the offset of the bad record or block;
// source errors are returned wrapped. Errors are sticky: once ReadInto has
// failed it returns the same error forever. On error p is left unchanged.
func (r *Reader) ReadInto(p *Packet) error {
	if r.err != nil {
		return r.err
	}
	var err error
	if r.format == formatPcap {
		err = r.readPcapRecord(p)
	} else {
		err = r.readNg(p)
	}
	if err != nil {
		r.err = err
	}
	return err
}

// Resume lets ReadInto read on after it returned io.EOF, from a source
// that has more to give since (a file being written, read up to a limit
// that moved): io.EOF is returned at a block or record boundary only,
// so the stream goes on from there. Any other error stays.
func (r *Reader) Resume() {
	if r.err == io.EOF {
		r.err, r.srcErr = nil, nil
	}
}

// ReadPacket is like ReadInto but returns a packet whose Data is a fresh
// copy owned by the caller.
func (r *Reader) ReadPacket() (Packet, error) {
	var p Packet
	if err := r.ReadInto(&p); err != nil {
		return Packet{}, err
	}
	p.Data = bytes.Clone(p.Data)
	return p, nil
}

// Interfaces returns the interfaces seen so far, indexed by Packet.Interface.
// For classic pcap it holds exactly one interface (Name "", the file's link
// type and snaplen). For pcapng it grows as Interface Description Blocks
// are read, which may happen in the middle of the file. Elements already
// returned never change; the caller must not modify the slice.
func (r *Reader) Interfaces() []Interface {
	return r.ifaces[:len(r.ifaces):len(r.ifaces)]
}

// SectionComments returns the comments (opt_comment) of the current
// pcapng section's header, in the order written; none for classic
// pcap. The slice must not be modified.
func (r *Reader) SectionComments() []string { return r.comments }

// Offset returns the number of bytes of the file consumed so far: after a
// successful ReadInto, the offset just past the packet's record or block.
func (r *Reader) Offset() int64 { return r.off }

// Nanosecond reports whether timestamps have nanosecond resolution in the
// file: true for the classic nanosecond magic, false for the microsecond
// one, and always true for pcapng (whose timestamps are converted to ns).
func (r *Reader) Nanosecond() bool { return r.nano }

func (r *Reader) readPcapRecord(p *Packet) error {
	start := r.off
	if err := r.fill(pcapRecordHeaderLen); err != nil {
		if err == io.EOF {
			return io.EOF
		}
		return r.readErr(start, "packet record header", err)
	}
	h := r.buf[r.r : r.r+pcapRecordHeaderLen]
	sec, frac := r.u32(h[0:]), r.u32(h[4:])
	incl, orig := r.u32(h[8:]), r.u32(h[12:])
	if incl > r.maxPacket {
		return formatErr(start, ErrTooLarge, "packet record captured length %d above limit %d", incl, r.maxPacket)
	}
	n := pcapRecordHeaderLen + int(incl)
	if err := r.fill(n); err != nil {
		return r.readErr(start, "packet record", err)
	}
	data := r.buf[r.r+pcapRecordHeaderLen : r.r+n : r.r+n]
	r.consume(n)

	p.Timestamp = int64(sec)*1e9 + int64(frac)*r.fracMul
	p.Interface = 0
	p.OrigLen = max(orig, incl)
	p.Data = data
	return nil
}

// fill makes at least n bytes available in r.buf[r.r:r.w], growing the
// buffer if needed (callers bound n). It returns nil when they are, io.EOF
// when the source ended with nothing buffered, io.ErrUnexpectedEOF when it
// ended with fewer than n bytes buffered, or the source's error.
func (r *Reader) fill(n int) error {
	if r.w-r.r >= n {
		return nil
	}
	if r.srcErr != nil {
		// Nothing more can come: the buffer stays as it is (a mapped
		// one is not ours to write).
		return r.fillResult(n)
	}
	if r.mapped {
		// The mapping is not ours to write: the unread bytes move to a
		// buffer of our own, once.
		nb := r.spare
		switch {
		case r.refill != nil:
			if nb = r.refill(max(n, minBufSize)); len(nb) < n {
				return errors.New("pcapfile: ReaderConfig.Refill returned a short buffer")
			}
		case len(nb) < max(n, minBufSize):
			nb = make([]byte, max(n, minBufSize))
		}
		r.w = copy(nb, r.buf[r.r:r.w])
		r.buf, r.r, r.mapped, r.spare = nb, 0, false, nil
	}
	if n > len(r.buf)-r.r {
		if r.refill != nil {
			nb := r.refill(n)
			if len(nb) < n {
				return errors.New("pcapfile: ReaderConfig.Refill returned a short buffer")
			}
			r.w = copy(nb, r.buf[r.r:r.w])
			r.buf = nb
		} else if n > len(r.buf) {
			nb := make([]byte, max(n, 2*len(r.buf)))
			r.w = copy(nb, r.buf[r.r:r.w])
			r.buf = nb
		} else {
			r.w = copy(r.buf, r.buf[r.r:r.w])
		}
		r.r = 0
	}
	for empty := 0; r.w-r.r < n && r.srcErr == nil; {
		m, err := r.src.Read(r.buf[r.w:])
		if m < 0 || m > len(r.buf)-r.w {
			r.srcErr = errors.New("pcapfile: source returned invalid count from Read")
			break
		}
		r.w += m
		switch {
		case err != nil:
			r.srcErr = err
		case m > 0:
			empty = 0
		default:
			if empty++; empty >= maxEmptyReads {
				r.srcErr = io.ErrNoProgress
			}
		}
	}
	return r.fillResult(n)
}

// fillResult is what fill returns once it has read what it could.
func (r *Reader) fillResult(n int) error {
	switch {
	case r.w-r.r >= n:
		return nil
	case r.srcErr == io.EOF && r.w == r.r:
		return io.EOF
	case r.srcErr == io.EOF:
		return io.ErrUnexpectedEOF
	}
	return r.srcErr
}

// consume marks n buffered bytes as read.
func (r *Reader) consume(n int) {
	r.r += n
	r.off += int64(n)
}

// discard skips n bytes without keeping them; io.EOF becomes
// io.ErrUnexpectedEOF since the caller expected n more bytes.
func (r *Reader) discard(n int64) error {
	for n > 0 {
		if r.w == r.r {
			if err := r.fill(1); err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		k := int(min(n, int64(r.w-r.r)))
		r.consume(k)
		n -= int64(k)
	}
	return nil
}

// readErr turns an error from fill or discard into the error ReadInto
// returns: a truncation is a *FormatError at start, anything else is a
// source error wrapped with context.
func (r *Reader) readErr(start int64, what string, err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return formatErr(start, ErrTruncated, "truncated %s", what)
	}
	return fmt.Errorf("pcapfile: reading %s at offset %d: %w", what, start, err)
}

// order is the section's byte order.
func (r *Reader) order() binary.ByteOrder {
	if r.be {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

func (r *Reader) u16(b []byte) uint16 {
	if r.be {
		return binary.BigEndian.Uint16(b)
	}
	return binary.LittleEndian.Uint16(b)
}

func (r *Reader) u32(b []byte) uint32 {
	if r.be {
		return binary.BigEndian.Uint32(b)
	}
	return binary.LittleEndian.Uint32(b)
}

func (r *Reader) u64(b []byte) uint64 {
	if r.be {
		return binary.BigEndian.Uint64(b)
	}
	return binary.LittleEndian.Uint64(b)
}
