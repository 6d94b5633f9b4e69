package wire

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func TestControlRoundTrip(t *testing.T) {
	h := Hello{Instance: [16]byte{1, 2, 3}, Codecs: 1, Name: "web-1", Host: "web-1.example", Token: "s3cret-token",
		Interfaces: []Interface{{"eth0", 1, 262144}, {"tun0", 101, 1500}}}
	w := Welcome{LastSeq: 77, MaxFrame: 1 << 24, Codecs: 1}
	st := Stats{Time: 123, AgentDrops: 4, Interfaces: []IfaceStats{{0, 10, 2, 1, 8}, {1, 5, 0, 0, 5}}}
	var b []byte
	b = AppendHello(b, &h)
	b = AppendWelcome(b, w)
	b = AppendReject(b, "agent name is empty")
	b = AppendAck(b, 99)
	b = AppendStats(b, &st)
	b = AppendIface(b, 2, &Interface{"veth1", 1, 9000})
	b = AppendPing(b)
	fr := NewFrameReader(bytes.NewReader(b), Limits{})
	next := func(want Type) []byte {
		t.Helper()
		hd, p, err := fr.Next()
		if err != nil || hd.Type != want {
			t.Fatalf("Next: %s %v, want %s", hd.Type, err, want)
		}
		return p
	}
	if got, err := ParseHello(next(TypeHello)); err != nil || !reflect.DeepEqual(got, h) {
		t.Errorf("hello: %+v %v", got, err)
	}
	if got, err := ParseWelcome(next(TypeWelcome)); err != nil || got != w {
		t.Errorf("welcome: %+v %v", got, err)
	}
	if got, err := ParseReject(next(TypeReject)); err != nil || got != "agent name is empty" {
		t.Errorf("reject: %q %v", got, err)
	}
	if got, err := ParseAck(next(TypeAck)); err != nil || got != 99 {
		t.Errorf("ack: %d %v", got, err)
	}
	var gs Stats
	if err := ParseStats(next(TypeStats), &gs); err != nil || !reflect.DeepEqual(gs, st) {
		t.Errorf("stats: %+v %v", gs, err)
	}
	if idx, ifc, err := ParseIface(next(TypeIface)); err != nil || idx != 2 || ifc != (Interface{"veth1", 1, 9000}) {
		t.Errorf("iface: %d %+v %v", idx, ifc, err)
	}
	if err := ParsePing(next(TypePing)); err != nil {
		t.Errorf("ping: %v", err)
	}
	if err := ParsePing([]byte{0}); !errors.Is(err, ErrMalformed) {
		t.Errorf("ping with a payload: %v, want ErrMalformed", err)
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Errorf("after last frame: %v, want io.EOF", err)
	}
}

func TestFrameReaderRejects(t *testing.T) {
	hdr := func(magic, ver byte, typ Type, flags byte, n uint32) []byte {
		b := AppendHeader(nil, typ, flags, n)
		b[0], b[1] = magic, ver
		return b
	}
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), ErrBadMagic},
		{"tls hello", []byte{0x16, 0x03, 0x01, 0x02, 0, 0, 0, 0}, ErrBadMagic},
		{"version", hdr(Magic, 9, TypeAck, 0, 8), ErrVersion},
		{"type 0", hdr(Magic, Version, 0, 0, 0), ErrUnknownType},
		{"type 200", hdr(Magic, Version, 200, 0, 0), ErrUnknownType},
		{"control flags", hdr(Magic, Version, TypeAck, 1, 8), ErrFlags},
		{"batch codec", hdr(Magic, Version, TypeBatch, 5, 40), ErrFlags},
		{"4 GiB batch", hdr(Magic, Version, TypeBatch, 0, 1<<32-1), ErrTooLarge},
		{"big hello", hdr(Magic, Version, TypeHello, 0, 1<<20), ErrTooLarge},
		{"truncated header", []byte{Magic, Version, 4}, io.ErrUnexpectedEOF},
		{"truncated payload", append(hdr(Magic, Version, TypeBatch, 0, 1000), make([]byte, 10)...), io.ErrUnexpectedEOF},
		{"claims 16 MiB, sends 10 bytes", append(hdr(Magic, Version, TypeBatch, 0, 16<<20), make([]byte, 10)...), io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := NewFrameReader(bytes.NewReader(tt.in), Limits{})
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, _, err := fr.Next()
			runtime.ReadMemStats(&after)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
				t.Errorf("%d bytes allocated for a claim", n)
			}
			if fr.bp != nil {
				t.Errorf("a buffer is still held after the error")
			}
		})
	}
}

func TestHelloMalformed(t *testing.T) {
	good := AppendHello(nil, &Hello{Name: "a", Interfaces: []Interface{{"eth0", 1, 100}}})[HeaderSize:]
	tests := []struct {
		name string
		p    []byte
		want error
	}{
		{"empty", nil, ErrTruncated},
		{"cut", good[:len(good)-1], ErrTruncated},
		{"trailing", append(append([]byte(nil), good...), 0), ErrMalformed},
		{"too many ifaces", append(append([]byte(nil), good[:len(good)-13]...), 0xff, 0xff), ErrTooLarge},
		{"ifaces cannot fit", append(append([]byte(nil), good[:len(good)-13]...), 0x00, 0x02), ErrTruncated},
		{"token over limit", AppendHello(nil, &Hello{Name: "a", Token: strings.Repeat("t", MaxTokenLen+1)})[HeaderSize:], ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := ParseHello(tt.p); !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestValidateName(t *testing.T) {
	for _, ok := range []string{"a", "web-1", "host.example.org", "A_b-9", strings.Repeat("x", MaxNameLen)} {
		if err := ValidateName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "../etc", "/abs", "a/b", "a\x00b", "a\nb", "-rf", ".hidden", "tab\t", "ü", strings.Repeat("x", MaxNameLen+1)} {
		if err := ValidateName(bad); !errors.Is(err, ErrBadName) {
			t.Errorf("%q: err = %v, want ErrBadName", bad, err)
		}
	}
}

// FuzzFrames feeds arbitrary streams to a FrameReader, unbudgeted and
// shared, and every parser: no panic, no buffer beyond the limit's size
// class, a budget that balances back to zero at close, and parsed
// control messages re-encode to what was read.
func FuzzFrames(f *testing.F) {
	f.Add(AppendHello(nil, &Hello{Name: "x", Interfaces: []Interface{{"e", 1, 2}}}))
	f.Add(AppendPing(AppendHello(nil, &Hello{Name: "x", Token: strings.Repeat("t", MaxTokenLen)})))
	f.Add(AppendStats(AppendAck(nil, 3), &Stats{Interfaces: []IfaceStats{{}}}))
	f.Add(encode([]Record{{Timestamp: 1, Data: []byte("hi")}}, 1))
	f.Add([]byte{Magic, Version, byte(TypeBatch), 0, 0xff, 0xff, 0xff, 0xff})
	f.Add(AppendInfo(AppendInfo(nil, &Info{}), &Info{Version: "1.4.0"}))
	f.Add([]byte{})
	const limit = 1 << 16
	_, maxBuf := classOf(limit + HeaderSize)
	f.Fuzz(func(t *testing.T, in []byte) {
		lim := Limits{MaxFrame: limit, MaxControl: 4096}
		mem := NewMemory(2*limit, 0)
		fuzzFrames(t, NewFrameReader(bytes.NewReader(in), lim), maxBuf)
		fr := NewSharedFrameReader(bytes.NewReader(in), lim, mem)
		fuzzFrames(t, fr, maxBuf)
		fr.Close()
		if st := mem.Stats(); st.Reserved != 0 || st.Waits != 0 {
			t.Fatalf("after close: %+v", st)
		}
	})
}

func fuzzFrames(t *testing.T, fr *FrameReader, maxBuf int) {
	for {
		h, p, err := fr.Next()
		if fr.bp != nil && cap(*fr.bp) > maxBuf {
			t.Fatalf("buffer %d over limit", cap(*fr.bp))
		}
		if err != nil {
			return
		}
		switch h.Type {
		case TypeHello:
			if hl, err := ParseHello(p); err == nil {
				if again := AppendHello(nil, &hl)[HeaderSize:]; !bytes.Equal(again, p) {
					t.Fatalf("hello re-encodes differently")
				}
			}
		case TypeStats:
			var s Stats
			if ParseStats(p, &s) == nil && !bytes.Equal(AppendStats(nil, &s)[HeaderSize:], p) {
				t.Fatalf("stats re-encodes differently")
			}
		case TypeInfo:
			if in, err := ParseInfo(p); err == nil && len(in.Version) > MaxVersionLen {
				t.Fatalf("info version of %d bytes accepted", len(in.Version))
			}
		case TypeBatch:
			if b, err := ParseBatch(h.Flags, p, BatchLimits{}); err == nil {
				_ = b.Validate(2)
			}
		default:
			ParseWelcome(p)
			ParseReject(p)
			ParseAck(p)
			ParseIface(p)
			ParsePing(p)
		}
	}
}
