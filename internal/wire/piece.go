package wire

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Pieces (the UDP transport). A batch frame larger than a datagram is
// cut into Count >= 2 pieces, each sent alone in its own datagram as a
// Piece frame (TypePiece, flags 0):
//
//	 0               8           12          16          20
//	+---------------+-----------+-----------+-----------+---------------
//	| first seq u64 | index u32 | count u32 | total u32 | data ...
//	+---------------+-----------+-----------+-----------+---------------
//
// first is the batch's own sequence number (the Seq of the frame the
// pieces carry); total is the length of that whole frame, header
// included. Piece index carries the frame's bytes [off, off+n) given by
// PieceSpan(total, count, index): the frame split as evenly as whole
// bytes allow, so no piece is empty, none overlaps another and the
// pieces tile the frame exactly. A piece is a datagram of its own: its
// sequence number is first + index, so a batch sent in Count pieces
// takes Count consecutive numbers and the next batch starts after them.
//
// A receiver puts the frame back together once every piece arrived and
// checks it like a batch that came whole (its CRC-32C covers the
// reassembled bytes). A piece is checked on its own (ParsePiece) before
// anything is kept or allocated for it.

// PieceHeaderSize is the bytes of a Piece payload before its data.
const PieceHeaderSize = 20

// PieceOverhead is what a piece costs a datagram beyond its data: the
// frame header and the piece header.
const PieceOverhead = HeaderSize + PieceHeaderSize

// Piece is a decoded Piece frame payload.
type Piece struct {
	First uint64 // sequence number of the batch, and of its piece 0
	Index uint32 // this piece, 0..Count-1
	Count uint32 // pieces of the batch, at least 2
	Total uint32 // bytes of the whole batch frame
	Data  []byte // frame bytes [Offset(), Offset()+len(Data)), aliasing the payload
}

// Seq returns the piece's own sequence number, the datagram's.
func (p *Piece) Seq() uint64 { return p.First + uint64(p.Index) }

// Offset returns where the piece's data starts in the batch frame.
func (p *Piece) Offset() int { off, _ := PieceSpan(p.Total, p.Count, p.Index); return off }

// PieceSpan returns the offset and length of piece index of a frame of
// total bytes cut into count pieces: bytes [index*total/count,
// (index+1)*total/count). With 1 <= count <= total every piece holds
// total/count bytes, rounded down or up.
func PieceSpan(total, count, index uint32) (off, n int) {
	t, c, i := uint64(total), uint64(count), uint64(index)
	lo, hi := i*t/c, (i+1)*t/c
	return int(lo), int(hi - lo)
}

// PieceCount returns how many pieces a frame of total bytes takes when
// a piece may carry at most room bytes of data: the fewest, ceil(total /
// room). room must be positive.
func PieceCount(total, room int) int { return (total + room - 1) / room }

// AppendPiece appends piece index of count of frame (a whole batch
// frame, whose sequence number is first) as a Piece frame to dst.
// count must be between 2 and len(frame) and index below count.
func AppendPiece(dst []byte, first uint64, index, count uint32, frame []byte) []byte {
	off, n := PieceSpan(uint32(len(frame)), count, index)
	dst = AppendHeader(dst, TypePiece, 0, uint32(PieceHeaderSize+n))
	dst = binary.LittleEndian.AppendUint64(dst, first)
	dst = binary.LittleEndian.AppendUint32(dst, index)
	dst = binary.LittleEndian.AppendUint32(dst, count)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(frame)))
	return append(dst, frame[off:off+n]...)
}

// ParsePiece decodes and checks a Piece payload: first not 0 and its
// count numbers not past the largest, 2 <= count <= total, index <
// count, total at most maxTotal (ErrTooLarge), and exactly the data
// PieceSpan gives for its index. It allocates nothing; Data aliases p,
// capped.
func ParsePiece(p []byte, maxTotal uint32) (Piece, error) {
	var pc Piece
	if len(p) < PieceHeaderSize {
		return pc, fmt.Errorf("piece: %d bytes, header needs %d: %w", len(p), PieceHeaderSize, ErrTruncated)
	}
	pc.First = binary.LittleEndian.Uint64(p)
	pc.Index = binary.LittleEndian.Uint32(p[8:])
	pc.Count = binary.LittleEndian.Uint32(p[12:])
	pc.Total = binary.LittleEndian.Uint32(p[16:])
	switch {
	case pc.First == 0:
		return pc, fmt.Errorf("piece: sequence 0: %w", ErrMalformed)
	case pc.Total > maxTotal:
		return pc, fmt.Errorf("piece: frame of %d bytes over limit %d: %w", pc.Total, maxTotal, ErrTooLarge)
	case pc.Count < 2 || pc.Count > pc.Total:
		return pc, fmt.Errorf("piece: %d pieces of a %d-byte frame: %w", pc.Count, pc.Total, ErrMalformed)
	case pc.Index >= pc.Count:
		return pc, fmt.Errorf("piece: index %d of %d: %w", pc.Index, pc.Count, ErrMalformed)
	case pc.First > math.MaxUint64-uint64(pc.Count-1):
		return pc, fmt.Errorf("piece: sequence %d + %d pieces overflows: %w", pc.First, pc.Count, ErrMalformed)
	}
	_, n := PieceSpan(pc.Total, pc.Count, pc.Index)
	if len(p)-PieceHeaderSize != n {
		return pc, fmt.Errorf("piece %d of %d: %d bytes of data, want %d: %w", pc.Index, pc.Count, len(p)-PieceHeaderSize, n, ErrMalformed)
	}
	pc.Data = p[PieceHeaderSize : PieceHeaderSize+n : PieceHeaderSize+n]
	return pc, nil
}

// MaxPieceTotal returns the largest batch frame, header included, that
// a receiver with limits lim puts back together from pieces.
func (l Limits) MaxPieceTotal() uint32 {
	return uint32(min(uint64(l.maxFrame())+HeaderSize, math.MaxUint32))
}
