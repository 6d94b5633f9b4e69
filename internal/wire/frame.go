package wire

import (
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

// Type is a frame type.
type Type uint8

// Frame types. Agent->collector: Hello, Batch, Stats, Iface, Ping, Bye,
// Piece. Collector->agent: Welcome, Reject, Ack. Bye is the UDP
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
)

var typeNames = [...]string{"", "hello", "welcome", "reject", "batch", "ack", "stats", "iface", "ping", "bye", "piece"}

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

// FrameReader reads frames from a stream, reusing one payload buffer.
// Wrap a net.Conn in a bufio.Reader first: FrameReader does two reads
// per frame.
type FrameReader struct {
	r   io.Reader
	lim Limits
	hdr [HeaderSize]byte
	buf []byte
	n   int64 // bytes consumed, for error offsets
}

// NewFrameReader returns a FrameReader on r with the given limits.
func NewFrameReader(r io.Reader, lim Limits) *FrameReader {
	return &FrameReader{r: r, lim: lim}
}

// Offset returns the number of stream bytes consumed so far.
func (fr *FrameReader) Offset() int64 { return fr.n }

// Next reads one frame. The payload aliases the reader's buffer and is
// valid until the next call. io.EOF means the stream ended cleanly
// between frames; a stream that ends inside a frame returns an error
// wrapping io.ErrUnexpectedEOF.
//
// The buffer grows only as bytes actually arrive (doubling from 64 KiB
// up to the claimed length), so a peer that claims a large frame and
// sends little costs little memory.
func (fr *FrameReader) Next() (Header, []byte, error) {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("frame header at offset %d: %w", fr.n, err)
		}
		return Header{}, nil, err
	}
	h, err := ParseHeader(&fr.hdr, fr.lim)
	if err != nil {
		return h, nil, fmt.Errorf("offset %d: %w", fr.n, err)
	}
	start := fr.n
	fr.n += HeaderSize
	need := int(h.Length)
	buf := fr.buf[:cap(fr.buf)]
	for got := 0; got < need; {
		if got == len(buf) {
			nb := make([]byte, min(need, max(2*len(buf), 64<<10)))
			copy(nb, buf[:got])
			buf, fr.buf = nb, nb
		}
		k, err := io.ReadFull(fr.r, buf[got:min(need, len(buf))])
		got += k
		fr.n += int64(k)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return h, nil, fmt.Errorf("%s frame at offset %d: payload %d of %d bytes: %w", h.Type, start, got, need, err)
		}
	}
	return h, buf[:need:need], nil
}
