package compress

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/pcapsync/pcapsync/internal/raceflag"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// samples are records sections of the kinds the codecs meet: packet-like
// bytes (repeated headers, text payloads), zeros, random bytes (TLS-like,
// incompressible), and tiny ones.
func samples() map[string][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 256<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	var pkt bytes.Buffer
	for i := range 2000 {
		pkt.Write([]byte{0x45, 0, 0, 60, byte(i >> 8), byte(i), 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 18, 0, 2})
		pkt.WriteString("GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n")
	}
	return map[string][]byte{
		"packets": pkt.Bytes(),
		"zeros":   make([]byte, 1<<20),
		"random":  random,
		"one":     {42},
	}
}

var specs = []Spec{{Codec: LZ4}, {Codec: S2}, {Codec: Zstd}, {Codec: Zstd, Level: 19}, {Codec: Auto}}

func TestRoundTrip(t *testing.T) {
	d, err := NewDecoder(4<<20, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	for _, sp := range specs {
		for name, src := range samples() {
			t.Run(sp.String()+"/"+name, func(t *testing.T) {
				// An encoder of its own: auto's backoff after an
				// incompressible sample would skip the next one, and
				// the samples come in map order.
				e, err := NewEncoder(sp)
				if err != nil {
					t.Fatal(err)
				}
				prefix := []byte("hdr")
				out, codec := e.Compress(append([]byte(nil), prefix...), src)
				if !bytes.Equal(out[:3], prefix) {
					t.Fatal("prefix of dst changed")
				}
				body := out[3:]
				if codec == wire.CodecNone {
					if len(body) != 0 {
						t.Fatalf("raw result appended %d bytes", len(body))
					}
					if name == "packets" || name == "zeros" {
						t.Fatalf("%s not compressed", name)
					}
					return
				}
				if codec != sp.Wire() {
					t.Fatalf("codec %s, want %s", codec, sp.Wire())
				}
				if len(body) >= len(src) {
					t.Fatalf("compressed %d bytes to %d", len(src), len(body))
				}
				got, err := d.Decompress(nil, codec, body, len(src))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, src) {
					t.Fatal("round trip changed the bytes")
				}
			})
		}
	}
}

func TestAutoSendsIncompressibleRaw(t *testing.T) {
	e, _ := NewEncoder(Spec{Codec: Auto})
	s := samples()
	tried := 0
	for range 200 {
		before := e.backoff
		out, codec := e.Compress(nil, s["random"])
		if codec != wire.CodecNone || len(out) != 0 {
			t.Fatalf("random bytes sent as %s, %d bytes", codec, len(out))
		}
		if e.backoff != before {
			tried++
		}
	}
	// Backing off 1, 2, 4 ... 64 batches: 200 batches try compression
	// about 8 times, not 200.
	if tried > 10 {
		t.Errorf("tried to compress %d of 200 incompressible batches", tried)
	}
	// Compressible traffic again: compressed within the backoff.
	n := 0
	for ; n <= 64; n++ {
		if _, codec := e.Compress(nil, s["packets"]); codec == wire.CodecS2 {
			break
		}
	}
	if n > 64 {
		t.Fatal("auto never compressed compressible traffic again")
	}
	if _, codec := e.Compress(nil, s["packets"]); codec != wire.CodecS2 {
		t.Fatal("auto stopped compressing compressible traffic")
	}
}

func TestDecompressRejects(t *testing.T) {
	d, _ := NewDecoder(64<<10, 1)
	defer d.Close()
	big := make([]byte, 1<<20) // 1 MiB of zeros: a small bomb
	zenc, _ := zstd.NewWriter(nil)
	lz := func(src []byte) []byte {
		e, _ := NewEncoder(Spec{Codec: LZ4})
		out, _ := e.Compress(nil, src)
		return out
	}
	small := samples()["packets"][:1000]
	tests := []struct {
		name   string
		codec  wire.Codec
		src    []byte
		rawLen int
		want   error
	}{
		{"declared over limit", wire.CodecS2, s2.Encode(nil, small), 1 << 20, ErrTooLarge},
		{"s2 bomb declared small", wire.CodecS2, s2.Encode(nil, big), 1000, ErrTooLarge},
		{"zstd bomb declared small", wire.CodecZstd, zenc.EncodeAll(big, nil), 1000, ErrTooLarge},
		{"zstd bomb without content size", wire.CodecZstd, zstdNoFCS(big), 1000, ErrTooLarge},
		{"lz4 bomb declared small", wire.CodecLZ4, lz(big[:60000]), 1000, ErrCorrupt},
		{"s2 shorter than declared", wire.CodecS2, s2.Encode(nil, small), 1001, ErrCorrupt},
		{"s2 garbage", wire.CodecS2, []byte{100, 0xff, 0xff, 0xff}, 100, ErrCorrupt},
		{"zstd garbage", wire.CodecZstd, []byte("not a zstd frame at all"), 100, ErrCorrupt},
		{"lz4 garbage", wire.CodecLZ4, []byte{0xf0, 1, 2}, 100, ErrCorrupt},
		{"raw length mismatch", wire.CodecNone, small, 999, ErrCorrupt},
		{"unknown codec", wire.Codec(9), small, 1000, wire.ErrFlags},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := d.Decompress(make([]byte, 0, 10), tt.codec, tt.src, tt.rawLen)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if len(out) != 0 || cap(out) > 64<<10 {
				t.Fatalf("returned %d bytes, capacity %d", len(out), cap(out))
			}
		})
	}
}

// zstdNoFCS is a zstd frame of src whose header does not declare the
// content size (a streaming encoder's).
func zstdNoFCS(src []byte) []byte {
	var b bytes.Buffer
	w, _ := zstd.NewWriter(&b)
	w.Write(src)
	w.Close()
	var h zstd.Header
	if h.Decode(b.Bytes()) != nil || h.HasFCS {
		panic("expected a frame without content size")
	}
	return b.Bytes()
}

// TestSteadyStateAllocs: with buffers sized by MaxEncodedLen and a
// decode buffer reused, compressing and decompressing allocate nothing.
func TestSteadyStateAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	src := samples()["packets"]
	d, _ := NewDecoder(4<<20, 1)
	defer d.Close()
	for _, sp := range specs {
		e, _ := NewEncoder(sp)
		buf := make([]byte, 0, MaxEncodedLen(len(src)))
		dec := make([]byte, 0, len(src))
		var out []byte
		var codec wire.Codec
		enc := testing.AllocsPerRun(20, func() { out, codec = e.Compress(buf[:0], src) })
		de := testing.AllocsPerRun(20, func() {
			var err error
			if dec, err = d.Decompress(dec, codec, out, len(src)); err != nil {
				t.Fatal(err)
			}
		})
		if enc != 0 || de != 0 {
			t.Errorf("%s: %v allocations to compress, %v to decompress, want 0", sp, enc, de)
		}
	}
}

func TestParseSpec(t *testing.T) {
	good := map[string]Spec{
		"none": {}, "lz4": {Codec: LZ4}, "s2": {Codec: S2},
		"zstd": {Codec: Zstd}, "zstd:1": {Codec: Zstd, Level: 1},
		"zstd:22": {Codec: Zstd, Level: 22}, "auto": {Codec: Auto},
		"gzip": {Codec: Gzip}, "gzip:1": {Codec: Gzip, Level: 1}, "gzip:9": {Codec: Gzip, Level: 9},
	}
	for s, want := range good {
		got, err := ParseSpec(s)
		if err != nil || got != want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", s, got, err, want)
		}
		var un Spec
		if err := un.UnmarshalText([]byte(s)); err != nil || un != want {
			t.Errorf("UnmarshalText(%q) = %+v, %v; want %+v", s, un, err, want)
		}
		if b, _ := got.MarshalText(); string(b) != s {
			t.Errorf("Spec(%q).MarshalText() = %q", s, b)
		}
	}
	if sp, err := ParseSpec(""); err != nil || sp != (Spec{}) {
		t.Errorf(`ParseSpec("") = %+v, %v; want none`, sp, err)
	}
	for _, s := range []string{"zstd:0", "zstd:23", "zstd:x", "gzip:10", "gzip:0", "s2:3", "auto:1", "none:1", "LZ4", "brotli"} {
		if _, err := ParseSpec(s); err == nil {
			t.Errorf("ParseSpec(%q) accepted", s)
		}
	}
}

// TestUse: each use allows its codecs, with their levels, and no other.
func TestUse(t *testing.T) {
	for _, tt := range []struct {
		use  Use
		good []string
		bad  []string
		want string // in the error
	}{
		{Batches, []string{"none", "lz4", "s2", "zstd", "zstd:22", "auto"}, []string{"gzip", "gzip:3"},
			"batch compression gzip: want none, lz4, s2, zstd[:1-22] or auto"},
		{Entries, []string{"none", "s2", "zstd:3"}, []string{"lz4", "auto", "gzip"},
			"entry compression lz4: want none, s2 or zstd[:1-22]"},
		{Files, []string{"none", "gzip", "gzip:9", "zstd:22"}, []string{"lz4", "s2", "auto"},
			"file compression lz4: want none, gzip[:1-9] or zstd[:1-22]"},
	} {
		for _, s := range tt.good {
			if _, err := tt.use.Parse(s); err != nil {
				t.Errorf("use %d: %q refused: %v", tt.use, s, err)
			}
		}
		for i, s := range tt.bad {
			_, err := tt.use.Parse(s)
			if err == nil {
				t.Errorf("use %d: %q accepted", tt.use, s)
			} else if i == 0 && err.Error() != tt.want {
				t.Errorf("use %d: %q: %q, want %q", tt.use, s, err, tt.want)
			}
		}
	}
	// Specs made in code are checked as well as parsed ones.
	for _, sp := range []Spec{{Codec: S2, Level: 1}, {Codec: Zstd, Level: 23}, {Codec: Zstd, Level: -1}, {Codec: numCodecs}} {
		if Batches.Check(sp) == nil {
			t.Errorf("Batches.Check(%+v) passed", sp)
		}
	}
}

// FuzzDecompress: no input makes a decoder panic, return more than the
// declared length, or grow a buffer past the limit.
func FuzzDecompress(f *testing.F) {
	s := samples()
	for _, sp := range specs[:3] {
		e, _ := NewEncoder(sp)
		out, codec := e.Compress(nil, s["packets"][:4000])
		f.Add(uint8(codec), out, uint32(4000))
		f.Add(uint8(codec), out[:len(out)/2], uint32(4000))
	}
	f.Fuzz(func(t *testing.T, codec uint8, src []byte, rawLen uint32) {
		const limit = 1 << 20
		d, _ := NewDecoder(limit, 1)
		defer d.Close()
		out, err := d.Decompress(nil, wire.Codec(codec&0x0f), src, int(rawLen&(1<<21-1)))
		if err == nil && len(out) != int(rawLen&(1<<21-1)) {
			t.Fatalf("decoded %d bytes, declared %d", len(out), rawLen)
		}
		if cap(out) > limit {
			t.Fatalf("buffer grew to %d, limit %d", cap(out), limit)
		}
	})
}

// FuzzRoundTrip: whatever the bytes, every codec gives them back.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte{})
	f.Add(make([]byte, 5000))
	d, _ := NewDecoder(1<<20, 1)
	var encs []*Encoder
	for _, sp := range specs {
		e, _ := NewEncoder(sp)
		encs = append(encs, e)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		for _, e := range encs {
			out, codec := e.Compress(nil, src)
			if codec == wire.CodecNone {
				continue
			}
			got, err := d.Decompress(nil, codec, out, len(src))
			if err != nil || !bytes.Equal(got, src) {
				t.Fatalf("%s: round trip of %d bytes: %v", e.spec, len(src), err)
			}
		}
	})
}
