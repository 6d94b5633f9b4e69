package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// split cuts frame into pieces of at most room data bytes with
// AppendPiece and returns the piece frames.
func split(frame []byte, first uint64, room int) [][]byte {
	n := PieceCount(len(frame), room)
	out := make([][]byte, n)
	for i := range n {
		out[i] = AppendPiece(nil, first, uint32(i), uint32(n), frame)
	}
	return out
}

// TestPieceRoundTrip: the pieces of a frame tile it exactly, each within
// the room, and put back together give the frame, whose batch parses.
func TestPieceRoundTrip(t *testing.T) {
	for _, size := range []int{1500, 1472, 9000, 65535, 300_000} {
		frame := encode([]Record{{Timestamp: 1, Data: bytes.Repeat([]byte{0xab}, size)}}, 7)
		for _, room := range []int{1472 - PieceOverhead, 548 - PieceOverhead, 8972 - PieceOverhead} {
			if len(frame) <= room {
				continue
			}
			ps := split(frame, 7, room)
			got := make([]byte, len(frame))
			covered := 0
			for i, d := range ps {
				h, p, rest, err := NextFrame(d, Limits{})
				if err != nil || h.Type != TypePiece || len(rest) != 0 {
					t.Fatalf("size %d room %d piece %d: %+v %v", size, room, i, h, err)
				}
				if len(d) > room+PieceOverhead {
					t.Fatalf("size %d room %d piece %d: %d bytes, over %d", size, room, i, len(d), room+PieceOverhead)
				}
				pc, err := ParsePiece(p, Limits{}.MaxPieceTotal())
				if err != nil {
					t.Fatal(err)
				}
				if pc.Seq() != 7+uint64(i) || pc.Offset() != covered || cap(pc.Data) != len(pc.Data) {
					t.Fatalf("piece %d: seq %d offset %d (want %d)", i, pc.Seq(), pc.Offset(), covered)
				}
				covered += copy(got[pc.Offset():], pc.Data)
			}
			if covered != len(frame) || !bytes.Equal(got, frame) {
				t.Fatalf("size %d room %d: reassembled %d of %d bytes, equal %v", size, room, covered, len(frame), bytes.Equal(got, frame))
			}
			if _, _, err := decodeFrame(t, got, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPieceCountMTU: a 1500-byte packet at MTU 1500 takes two pieces
// (three would cost a third more loss).
func TestPieceCountMTU(t *testing.T) {
	frame := encode([]Record{{Timestamp: 1, Data: make([]byte, 1500)}}, 1)
	if n := PieceCount(len(frame), 1500-DatagramOverhead(false)-PieceOverhead); n != 2 {
		t.Fatalf("%d pieces for a %d-byte frame at MTU 1500, want 2", n, len(frame))
	}
	if n := PieceCount(len(frame), 1500-DatagramOverhead(true)-PieceOverhead); n != 2 {
		t.Fatalf("%d pieces over IPv6, want 2", n)
	}
}

func TestParsePiece(t *testing.T) {
	frame := bytes.Repeat([]byte{1}, 100)
	good := AppendPiece(nil, 5, 1, 3, frame)[HeaderSize:]
	edit := func(off int, v uint32) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint32(b[off:], v)
		return b
	}
	seq := func(v uint64) []byte {
		b := bytes.Clone(good)
		binary.LittleEndian.PutUint64(b, v)
		return b
	}
	for _, tc := range []struct {
		name string
		p    []byte
		max  uint32
		err  error
	}{
		{"good", good, 1000, nil},
		{"short", good[:PieceHeaderSize-1], 1000, ErrTruncated},
		{"seq 0", seq(0), 1000, ErrMalformed},
		{"seq overflows", seq(math.MaxUint64 - 1), 1000, ErrMalformed},
		{"index = count", edit(8, 3), 1000, ErrMalformed},
		{"count 1", edit(12, 1), 1000, ErrMalformed},
		{"count over total", edit(12, 101), 1000, ErrMalformed},
		{"other count", edit(12, 4), 1000, ErrMalformed},
		{"other total", edit(16, 101), 1000, ErrMalformed},
		{"total over limit", good, 99, ErrTooLarge},
		{"a byte more", append(bytes.Clone(good), 0), 1000, ErrMalformed},
		{"a byte less", good[:len(good)-1], 1000, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc, err := ParsePiece(tc.p, tc.max)
			if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("ParsePiece = %+v, %v; want %v", pc, err, tc.err)
			}
		})
	}
}

// FuzzPiece: ParsePiece never panics, and a piece it accepts has the
// invariants its doc comment lists; PieceSpan tiles every frame.
func FuzzPiece(f *testing.F) {
	frame := encode([]Record{{Timestamp: 1, Data: make([]byte, 3000)}}, 9)
	for _, d := range split(frame, 9, 1000) {
		f.Add(d[HeaderSize:], uint32(1<<16))
	}
	f.Add([]byte{}, uint32(0))
	f.Add(make([]byte, PieceHeaderSize), uint32(math.MaxUint32))
	f.Fuzz(func(t *testing.T, p []byte, max uint32) {
		pc, err := ParsePiece(p, max)
		if err != nil {
			return
		}
		off, n := PieceSpan(pc.Total, pc.Count, pc.Index)
		switch {
		case pc.First == 0 || pc.Count < 2 || pc.Index >= pc.Count || pc.Total > max || pc.Count > pc.Total:
			t.Fatalf("accepted %+v (max %d)", pc, max)
		case pc.First+uint64(pc.Count-1) < pc.First:
			t.Fatalf("accepted an overflowing sequence: %+v", pc)
		case n < 1 || off+n > int(pc.Total) || len(pc.Data) != n || len(p) != PieceHeaderSize+n:
			t.Fatalf("span %d+%d of %d, data %d", off, n, pc.Total, len(pc.Data))
		}
		// The pieces of a frame of this total tile it, in order.
		if pc.Count <= 4096 {
			next := 0
			for i := range pc.Count {
				o, k := PieceSpan(pc.Total, pc.Count, i)
				if o != next || k < 1 {
					t.Fatalf("piece %d of %d of %d bytes at %d+%d, want at %d", i, pc.Count, pc.Total, o, k, next)
				}
				next += k
			}
			if next != int(pc.Total) {
				t.Fatalf("pieces cover %d of %d bytes", next, pc.Total)
			}
		}
	})
}
