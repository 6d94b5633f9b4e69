package wire

import (
	"errors"
	"testing"
)

func TestCheckDatagram(t *testing.T) {
	hello := AppendHello(nil, &Hello{Name: "a", Interfaces: []Interface{{"eth0", 1, 65535}}})
	batch := encode([]Record{{Timestamp: 1, Data: []byte("packet")}}, 1)
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	tests := []struct {
		name   string
		d      []byte
		frames int
		err    error
	}{
		{"batch", batch, 1, nil},
		{"hello and batch", cat(hello, batch), 2, nil},
		{"control frames", cat(hello, AppendPing(nil), AppendBye(nil)), 3, nil},
		{"empty", nil, 0, ErrTruncated},
		{"short header", batch[:5], 0, ErrTruncated},
		{"cut payload", batch[:len(batch)-1], 0, ErrTruncated},
		{"trailing bytes", cat(batch, []byte{Magic}), 1, ErrTruncated},
		{"two batches", cat(batch, batch), 1, ErrMalformed},
		{"hello and piece", cat(hello, AppendPiece(nil, 1, 0, 2, batch)), 2, nil},
		{"batch and piece", cat(batch, AppendPiece(nil, 1, 0, 2, batch)), 1, ErrMalformed},
		{"two pieces", cat(AppendPiece(nil, 1, 0, 2, batch), AppendPiece(nil, 1, 1, 2, batch)), 1, ErrMalformed},
		{"bad magic", []byte{0x16, 3, 1, 0, 0, 0, 0, 0}, 0, ErrBadMagic},
		{"length over limit", AppendHeader(nil, TypeHello, 0, DefaultMaxControl+1), 0, ErrTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := CheckDatagram(tc.d, Limits{})
			if n != tc.frames || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("CheckDatagram = %d, %v; want %d, %v", n, err, tc.frames, tc.err)
			}
		})
	}
}

func TestNextFrame(t *testing.T) {
	d := AppendBye(AppendHello(nil, &Hello{Name: "a"}))
	h, p, rest, err := NextFrame(d, Limits{})
	if err != nil || h.Type != TypeHello || cap(p) != len(p) {
		t.Fatalf("first frame: %+v cap %d/%d %v", h, len(p), cap(p), err)
	}
	if hl, err := ParseHello(p); err != nil || hl.Name != "a" {
		t.Fatalf("hello: %+v %v", hl, err)
	}
	h, p, rest, err = NextFrame(rest, Limits{})
	if err != nil || h.Type != TypeBye || len(rest) != 0 || ParseBye(p) != nil {
		t.Fatalf("second frame: %+v %v rest %d", h, err, len(rest))
	}
	if err := ParseBye([]byte{1}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("bye with a payload: %v", err)
	}
}

// FuzzDatagram: CheckDatagram never panics, and a datagram it accepts
// splits into exactly that many frames with NextFrame, the payloads
// covering it to its last byte.
func FuzzDatagram(f *testing.F) {
	f.Add(AppendBye(AppendHello(nil, &Hello{Name: "x"})))
	f.Add(encode([]Record{{Timestamp: 1, Data: []byte("hi")}}, 1))
	f.Add(AppendPiece(nil, 3, 1, 2, encode([]Record{{Timestamp: 1, Data: []byte("hi")}}, 3)))
	f.Add([]byte{Magic, Version, byte(TypeBatch), 0, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, d []byte) {
		n, err := CheckDatagram(d, Limits{MaxFrame: 1 << 16})
		if err != nil {
			return
		}
		total := 0
		for range n {
			_, p, rest, err := NextFrame(d, Limits{MaxFrame: 1 << 16})
			if err != nil {
				t.Fatalf("accepted datagram fails NextFrame: %v", err)
			}
			total += HeaderSize + len(p)
			d = rest
		}
		if len(d) != 0 || total == 0 {
			t.Fatalf("%d bytes left after %d frames", len(d), n)
		}
	})
}
