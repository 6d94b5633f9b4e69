package wire

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
)

// Frame header, 8 bytes, integers little-endian:
//
//	 0        1        2        3        4        5        6        7
//	+--------+--------+--------+--------+--------+--------+--------+--------+
//	| magic  |version |  type  | flags  |      payload length (u32 LE)      |
//	+--------+--------+--------+--------+--------+--------+--------+--------+
//
// magic is 0xA7, a byte no text protocol and no TLS record starts with, so
// a confused peer is rejected on its first byte. version is Version. flags
// is defined per type: for TypeBatch the low 4 bits are the Codec, bit 4
// is FlagUnchecked and the high 3 bits are reserved (zero); for every
// other type all bits are reserved. The payload length counts the bytes after the header.
//
// Versioning rule: a change that an old reader would misread (a new field
// inside an existing payload, a new meaning for a flag) bumps Version. New
// frame types and new codecs do not: they are negotiated in the handshake
// and an old peer rejects them as unknown.
const (
	Magic      = 0xA7
	Version    = 1
	HeaderSize = 8
)

// DefaultPort is the collector's port (TCP, and UDP where enabled) when
// an address gives none.
const DefaultPort = 7733

// Type is a frame type.
type Type uint8

// Frame types. Agent->collector: Hello, Batch, Stats, Iface, Ping, Bye,
// Piece, Info. Collector->agent: Welcome, Reject, Ack. Bye is the UDP
// transport's goodbye (TCP says goodbye with its FIN); Piece carries a
// slice of a batch frame too large for one datagram (UDP only, see
// AppendPiece).
const (
	TypeHello   Type = 1
	TypeWelcome Type = 2
	TypeReject  Type = 3
	TypeBatch   Type = 4
	TypeAck     Type = 5
	TypeStats   Type = 6
	TypeIface   Type = 7
	TypePing    Type = 8
	TypeBye     Type = 9
	TypePiece   Type = 10
	TypeInfo    Type = 11 // sent only after a Welcome with FeatureInfo (see info.go)
)

var typeNames = [...]string{"", "hello", "welcome", "reject", "batch", "ack", "stats", "iface", "ping", "bye", "piece", "info"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Codec is the compression of a batch's records section, carried in the
// low 4 bits of a batch frame's flags.
type Codec uint8

// Codecs. CodecNone was the only codec of protocol version 1's first
// release and every peer accepts it; the others are sent only when the
// collector's Welcome lists them. Values 4..15 are reserved.
const (
	CodecNone Codec = 0 // records as they are
	CodecLZ4  Codec = 1 // one LZ4 block (github.com/pierrec/lz4/v4 CompressBlock)
	CodecS2   Codec = 2 // one S2 block (github.com/klauspost/compress/s2 Encode)
	CodecZstd Codec = 3 // one zstd frame (RFC 8878)

	numCodecs = 4
)

var codecNames = [numCodecs]string{"none", "lz4", "s2", "zstd"}

func (c Codec) String() string {
	if int(c) < len(codecNames) {
		return codecNames[c]
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Known reports whether c is a codec of this protocol version.
func (c Codec) Known() bool { return c < numCodecs }

// Limits bound what a FrameReader accepts. The zero value means the
// defaults below.
type Limits struct {
	// MaxFrame is the largest payload of any frame, in bytes.
	// 0 means DefaultMaxFrame.
	MaxFrame uint32
	// MaxControl is the largest payload of a non-batch frame.
	// 0 means DefaultMaxControl.
	MaxControl uint32
}

// Default limits.
const (
	DefaultMaxFrame   = 16 << 20
	DefaultMaxControl = 64 << 10
)

func (l Limits) maxFrame() uint32 {
	if l.MaxFrame == 0 {
		return DefaultMaxFrame
	}
	return l.MaxFrame
}

func (l Limits) maxControl() uint32 {
	if l.MaxControl == 0 {
		return DefaultMaxControl
	}
	return min(l.MaxControl, l.maxFrame())
}

// Header is a decoded frame header.
type Header struct {
	Type   Type
	Flags  uint8
	Length uint32
}

// AppendHeader appends a frame header to dst.
func AppendHeader(dst []byte, t Type, flags uint8, length uint32) []byte {
	return append(dst, Magic, Version, byte(t), flags,
		byte(length), byte(length>>8), byte(length>>16), byte(length>>24))
}

// ParseHeader decodes and checks a frame header against lim: magic,
// version, known type, reserved flags and the length limit for the type.
func ParseHeader(b *[HeaderSize]byte, lim Limits) (Header, error) {
	h := Header{Type: Type(b[2]), Flags: b[3], Length: binary.LittleEndian.Uint32(b[4:])}
	switch {
	case b[0] != Magic:
		return h, fmt.Errorf("frame header: byte 0x%02x: %w", b[0], ErrBadMagic)
	case b[1] != Version:
		return h, fmt.Errorf("frame header: version %d (want %d): %w", b[1], Version, ErrVersion)
	case h.Type == 0 || int(h.Type) >= len(typeNames):
		return h, fmt.Errorf("frame header: %s: %w", h.Type, ErrUnknownType)
	}
	limit := lim.maxControl()
	if h.Type == TypeBatch {
		limit = lim.maxFrame()
		if !Codec(h.Flags&0x0f).Known() || h.Flags&^(0x0f|FlagUnchecked) != 0 {
			return h, fmt.Errorf("frame header: batch flags 0x%02x: %w", h.Flags, ErrFlags)
		}
	} else if h.Flags != 0 {
		return h, fmt.Errorf("frame header: %s flags 0x%02x: %w", h.Type, h.Flags, ErrFlags)
	}
	if h.Length > limit {
		return h, fmt.Errorf("frame header: %s payload of %d bytes over limit %d: %w", h.Type, h.Length, limit, ErrTooLarge)
	}
	return h, nil
}

// FrameReader reads frames from a stream. Each payload is read into a
// buffer of its size class, taken from a pool once the frame's header
// arrived and given back when the frame was handled (Release, or the
// next call to Next), so a reader between frames holds no buffer.
// Not safe for concurrent use.
//
// A reader from NewFrameReader reads exactly the bytes of the frames it
// returns (wrap a net.Conn in a bufio.Reader first: it does two reads
// per frame); its buffers come from an unbounded pool. A reader from
// NewSharedFrameReader reserves each buffer from a Memory first, waiting
// while the budget is spent (so the stream is not read: TCP
// backpressure), and reads ahead up to one frame header past each
// payload (Buffered), so it must be the stream's only reader.
type FrameReader struct {
	r     io.Reader
	lim   Limits
	mem   *Memory // nil: unbudgeted, no read-ahead
	pools *pools
	hdr   [HeaderSize]byte // the next header, or its first have bytes
	have  int
	n     int64 // bytes consumed, for error offsets

	bp     *[]byte // the current payload's buffer, or nil
	class  int     // its size class
	last   int     // the last payload's length (unbudgeted readers)
	closed bool
	wait   waiter
}

// NewFrameReader returns a FrameReader on r with the given limits.
func NewFrameReader(r io.Reader, lim Limits) *FrameReader {
	return &FrameReader{r: r, lim: lim, pools: &unbudgeted}
}

// NewSharedFrameReader returns a FrameReader on r with the given limits
// whose payload buffers are reserved from mem. Call Close when done with
// it, so that its last buffer goes back.
func NewSharedFrameReader(r io.Reader, lim Limits, mem *Memory) *FrameReader {
	return &FrameReader{r: r, lim: lim, mem: mem, pools: &mem.pools}
}

// Offset returns the number of stream bytes consumed so far: the end of
// the last frame returned (bytes read ahead are not counted).
func (fr *FrameReader) Offset() int64 { return fr.n }

// Buffered returns how many bytes of the next frame's header were
// already read: HeaderSize means another frame has begun to arrive.
func (fr *FrameReader) Buffered() int { return fr.have }

// Peek returns the next n bytes of the stream (n <= HeaderSize) without
// consuming them. They are valid until the next call to Next.
func (fr *FrameReader) Peek(n int) ([]byte, error) {
	if n > HeaderSize {
		n = HeaderSize
	}
	if fr.have < n {
		k, err := io.ReadAtLeast(fr.r, fr.hdr[fr.have:], n-fr.have)
		fr.have += k
		if err != nil {
			return fr.hdr[:fr.have], err
		}
	}
	return fr.hdr[:n], nil
}

// Next reads one frame; it is NextContext without a context.
func (fr *FrameReader) Next() (Header, []byte, error) {
	return fr.NextContext(context.Background())
}

// NextContext reads one frame. The payload is valid until the next call
// to NextContext, Next, Release or Close. io.EOF means the stream ended
// cleanly between frames; a stream that ends inside a frame returns an
// error wrapping io.ErrUnexpectedEOF. A header is checked against the
// limits before any memory is reserved for its payload. While a shared
// reader waits for memory, ctx ending returns an error wrapping ctx's
// cause, with nothing reserved.
func (fr *FrameReader) NextContext(ctx context.Context) (Header, []byte, error) {
	fr.Release()
	if fr.closed {
		return Header{}, nil, ErrClosed
	}
	if fr.have < HeaderSize {
		k, err := io.ReadAtLeast(fr.r, fr.hdr[fr.have:], HeaderSize-fr.have)
		fr.have += k
		if err != nil {
			if err == io.ErrUnexpectedEOF || err == io.EOF && fr.have > 0 {
				err = fmt.Errorf("frame header at offset %d: %w", fr.n, io.ErrUnexpectedEOF)
			}
			return Header{}, nil, err
		}
	}
	fr.have = 0
	h, err := ParseHeader(&fr.hdr, fr.lim)
	if err != nil {
		return h, nil, fmt.Errorf("offset %d: %w", fr.n, err)
	}
	start := fr.n
	fr.n += HeaderSize
	need := int(h.Length)
	if need == 0 {
		return h, nil, nil
	}
	if fr.mem == nil {
		return fr.readGrowing(h, start, need)
	}
	want := need + HeaderSize // room to read the next header with the payload
	class, size := classOf(want)
	if int64(need) > fr.mem.limit {
		return h, nil, fmt.Errorf("%s frame at offset %d: payload of %d bytes over the memory budget of %d: %w", h.Type, start, need, fr.mem.limit, ErrTooLarge)
	}
	if int64(size) > fr.mem.limit {
		class, size = topClass, int(fr.mem.limit)
	}
	if err := fr.mem.acquire(ctx, &fr.wait, int64(size)); err != nil {
		return h, nil, fmt.Errorf("%s frame at offset %d: waiting for %d bytes of memory: %w", h.Type, start, size, err)
	}
	fr.bp, fr.class = fr.getBuf(class, size), class
	buf := (*fr.bp)[:min(want, size)]
	got, err := io.ReadAtLeast(fr.r, buf, need)
	if err != nil {
		fr.Release()
		return h, nil, fr.payloadErr(h, start, got, need, err)
	}
	fr.have = copy(fr.hdr[:], buf[need:got])
	fr.n += int64(need)
	return h, buf[:need:need], nil
}

// growFrom is the first buffer size of an unbudgeted reader's payload.
const growFrom = 64 << 10

// readGrowing reads a payload without a budget into pooled buffers
// that grow (doubling, from growFrom or the last payload's size) only
// as its bytes arrive, so a peer that claims a large frame and sends
// little costs little memory.
func (fr *FrameReader) readGrowing(h Header, start int64, need int) (Header, []byte, error) {
	class, size := classOf(min(need, max(growFrom, fr.last)))
	bp := fr.pools.get(class, size)
	got := 0
	for {
		buf := *bp
		k, err := io.ReadFull(fr.r, buf[got:min(need, len(buf))])
		got += k
		if err != nil {
			fr.pools.put(class, bp)
			return h, nil, fr.payloadErr(h, start, got, need, err)
		}
		if got == need {
			break
		}
		nclass, nsize := classOf(min(need, 2*len(buf)))
		nbp := fr.pools.get(nclass, nsize)
		copy(*nbp, buf[:got])
		fr.pools.put(class, bp)
		bp, class = nbp, nclass
	}
	fr.bp, fr.class, fr.last = bp, class, need
	fr.n += int64(need)
	return h, (*bp)[:need:need], nil
}

func (fr *FrameReader) payloadErr(h Header, start int64, got, need int, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	fr.n += int64(got)
	return fmt.Errorf("%s frame at offset %d: payload %d of %d bytes: %w", h.Type, start, got, need, err)
}

// getBuf returns a buffer of the class from mem's pools.
func (fr *FrameReader) getBuf(class, size int) *[]byte {
	if class == topClass {
		if bp, _ := fr.mem.top.Get().(*[]byte); bp != nil {
			return bp
		}
		b := make([]byte, size)
		return &b
	}
	return fr.pools.get(class, size)
}

// Release gives the last payload's buffer (and its reservation) back
// before the next call to Next; the payload must no longer be used.
// Calling it again does nothing.
func (fr *FrameReader) Release() {
	bp := fr.bp
	if bp == nil {
		return
	}
	fr.bp = nil
	if fr.class == topClass {
		fr.mem.top.Put(bp)
	} else {
		fr.pools.put(fr.class, bp)
	}
	if fr.mem != nil {
		fr.mem.release(int64(cap(*bp)))
	}
}

// Close releases the reader's buffer; Next then returns ErrClosed. It
// does not close the stream.
func (fr *FrameReader) Close() {
	fr.Release()
	fr.closed = true
}
