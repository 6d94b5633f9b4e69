package pcapzstd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// stream is a generated input: a pcapng section (either byte order) of
// packets from a few flows, with the kinds of payload and damage a
// case asks for.
type stream struct {
	big     bool    // the section is big-endian
	flows   int     // distinct flows
	text    bool    // payloads of text (else random)
	zero    bool    // payloads of zeros
	odd     float64 // share of other blocks (statistics, custom) between packets
	garbage bool    // a length that lies, then random bytes
	raw     bool    // not pcapng at all: random bytes
}

func (s stream) gen(r *rand.Rand, n int) []byte {
	if s.raw {
		b := make([]byte, n*200)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	var ord binary.AppendByteOrder = binary.LittleEndian
	if s.big {
		ord = binary.BigEndian
	}
	block := func(dst []byte, typ uint32, body []byte) []byte {
		pad := (4 - len(body)%4) % 4
		total := uint32(12 + len(body) + pad)
		dst = ord.AppendUint32(dst, typ)
		dst = ord.AppendUint32(dst, total)
		dst = append(dst, body...)
		dst = append(dst, make([]byte, pad)...)
		return ord.AppendUint32(dst, total)
	}
	var out, body []byte
	body = ord.AppendUint32(body[:0], 0x1a2b3c4d)
	body = ord.AppendUint16(body, 1)
	body = ord.AppendUint16(body, 0)
	body = ord.AppendUint64(body, ^uint64(0))
	out = block(out, 0x0a0d0d0a, body)
	body = ord.AppendUint16(body[:0], 1) // Ethernet
	body = append(body, 0, 0)
	body = ord.AppendUint32(body, 262144)
	out = block(out, 1, body)
	type flow struct{ mac, ip, ports []byte }
	flows := make([]flow, max(s.flows, 1))
	for i := range flows {
		flows[i] = flow{mac: rnd(r, 12), ip: rnd(r, 8), ports: rnd(r, 4)}
	}
	words := []string{"GET ", "/index.html ", "HTTP/1.1\r\n", "Host: example.com\r\n", "{\"user\": ", "\"value\", ", "Content-Length: 42\r\n"}
	ts := uint64(1_700_000_000_000_000)
	for i := range n {
		if r.Float64() < s.odd {
			out = block(out, uint32(3+r.IntN(2)*0x0bad), rnd(r, r.IntN(40)))
			continue
		}
		f := flows[r.IntN(len(flows))]
		size := []int{64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1500}[r.IntN(12)]
		if r.IntN(5) == 0 {
			size = 14 + r.IntN(1500) // any length, truncated packets too
		}
		pkt := make([]byte, 0, size)
		pkt = append(pkt, f.mac...)
		pkt = append(pkt, 8, 0, 0x45, 0)
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(size-14))
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(i))
		pkt = append(pkt, 0x40, 0, 64, 17, byte(r.Uint32()), byte(r.Uint32()))
		pkt = append(pkt, f.ip...)
		pkt = append(pkt, f.ports...)
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(size-34))
		pkt = append(pkt, byte(r.Uint32()), byte(r.Uint32()))
		for len(pkt) < size {
			switch {
			case s.zero:
				pkt = append(pkt, 0)
			case s.text:
				pkt = append(pkt, words[r.IntN(len(words))]...)
			default:
				pkt = append(pkt, byte(r.Uint32()))
			}
		}
		pkt = pkt[:size]
		ts += uint64(r.IntN(2000))
		body = ord.AppendUint32(body[:0], 0)
		body = ord.AppendUint32(body, uint32(ts>>32))
		body = ord.AppendUint32(body, uint32(ts))
		body = ord.AppendUint32(body, uint32(len(pkt)))
		body = ord.AppendUint32(body, uint32(len(pkt)+r.IntN(2)))
		body = append(body, pkt...)
		out = block(out, 6, body)
		if s.garbage && i == n/2 {
			out = ord.AppendUint32(out, 6)
			out = ord.AppendUint32(out, 7) // not a multiple of 4
			out = append(out, rnd(r, 3000)...)
		}
	}
	return out
}

func rnd(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var cases = map[string]stream{
	"one flow":           {flows: 1},
	"many flows":         {flows: 300},
	"big-endian":         {big: true, flows: 5},
	"text":               {flows: 3, text: true},
	"zero payloads":      {flows: 2, zero: true},
	"other blocks":       {flows: 4, odd: 0.2},
	"a lying length":     {flows: 4, garbage: true},
	"not pcapng":         {raw: true},
	"big-endian, others": {big: true, flows: 50, odd: 0.1},
}

// encode writes in to an Encoder in random pieces with random flushes,
// in frames ending at the given points, and checks after every flush
// that what was written, with an empty last block, decodes to the input
// so far (what repair relies on).
func encode(t *testing.T, r *rand.Rand, in []byte, frames int) []byte {
	t.Helper()
	var out bytes.Buffer
	e := NewEncoder(&out)
	cuts := map[int]bool{}
	for range frames - 1 {
		cuts[r.IntN(len(in))] = true
	}
	frameStart, pos := 0, 0
	for pos < len(in) {
		n := min(1+r.IntN(200_000), len(in)-pos)
		for c := range cuts {
			if c > pos && c < pos+n {
				n = c - pos
			}
		}
		if _, err := e.Write(in[pos : pos+n]); err != nil {
			t.Fatal(err)
		}
		pos += n
		if cuts[pos] {
			if err := e.Close(); err != nil {
				t.Fatal(err)
			}
			frameStart = out.Len()
			e.Reset(&out)
			continue
		}
		if r.IntN(3) == 0 {
			if err := e.Flush(); err != nil {
				t.Fatal(err)
			}
			cut := append(append([]byte(nil), out.Bytes()[frameStart:]...), emptyLast[:]...)
			if out.Len() == frameStart {
				continue
			}
			got := decode(t, cut)
			if want := in[pos-len(got) : pos]; len(got) == 0 || !bytes.Equal(got, want) {
				t.Fatalf("the frame cut at a flush at %d decodes to %d bytes, not the frame's input so far", pos, len(got))
			}
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func decode(t *testing.T, b []byte) []byte {
	t.Helper()
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.DecodeAll(b, nil)
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	return got
}

// TestRoundTrip: every generated stream, in one frame or several, with
// random writes and flushes, decodes to itself with the klauspost
// decoder and with zstd's own (the zstd command, where installed).
func TestRoundTrip(t *testing.T) {
	zstdCmd, _ := exec.LookPath("zstd")
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(4) {
				r := rand.New(rand.NewPCG(seed, 7))
				in := s.gen(r, 3000+r.IntN(20000))
				frames := 1 + int(seed%3)
				z := encode(t, r, in, frames)
				if got := decode(t, z); !bytes.Equal(got, in) {
					t.Fatalf("seed %d: decoded %d bytes, not the %d written", seed, len(got), len(in))
				}
				if zstdCmd != "" {
					cmd := exec.Command(zstdCmd, "-d", "-c", "-q")
					cmd.Stdin = bytes.NewReader(z)
					got, err := cmd.Output()
					if err != nil || !bytes.Equal(got, in) {
						t.Fatalf("seed %d: zstd -d: %v, %d bytes of %d", seed, err, len(got), len(in))
					}
				}
				t.Logf("seed %d: %d -> %d bytes (%.3f), %d frames", seed, len(in), len(z), float64(len(z))/float64(len(in)), frames)
			}
		})
	}
}

// TestEmpty: a frame of nothing and a flush of nothing.
func TestEmpty(t *testing.T) {
	var out bytes.Buffer
	e := NewEncoder(&out)
	if err := e.Flush(); err != nil || out.Len() != 0 {
		t.Fatalf("a flush of nothing wrote %d bytes (%v)", out.Len(), err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, out.Bytes()); len(got) != 0 {
		t.Fatalf("an empty frame decodes to %d bytes", len(got))
	}
	if _, err := e.Write([]byte{1}); err != ErrClosed {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
}

// TestWindow: matches reach no further than the window, however far
// back the same flow's last packet lies.
func TestWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	in := stream{flows: 2}.gen(r, 2000)
	// Push the second flow's packets apart with 3 MiB of other blocks.
	var mid []byte
	for len(mid) < 3<<20 {
		mid = binary.LittleEndian.AppendUint32(mid, 0x0bad)
		mid = binary.LittleEndian.AppendUint32(mid, 65536)
		mid = append(mid, rnd(r, 65524)...)
		mid = binary.LittleEndian.AppendUint32(mid, 65536)
	}
	half := len(in) / 2
	for binary.LittleEndian.Uint32(in[half:]) != 6 || binary.LittleEndian.Uint32(in[half+4:])%4 != 0 {
		half++ // a block's start, most likely
	}
	all := append(append(append([]byte(nil), in[:half]...), mid...), in[half:]...)
	z := encode(t, r, all, 1)
	if got := decode(t, z); !bytes.Equal(got, all) {
		t.Fatal("the frame does not decode to its input")
	}
}

// TestRatio: on packets with random payloads the frames are about as
// small as the library's fastest level makes them (within 3%: both find
// the headers' repeats, and nothing else repeats; this encoder skips
// matches under 6 bytes), from one flow or many;
// on zero payloads, where matches run on through the payloads, under a
// fifth of the input.
func TestRatio(t *testing.T) {
	lib, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(Window))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		s      stream
		vsLib  float64 // at most this times the library's size
		vsSelf float64 // at most this share of the input
	}{
		{stream{flows: 1}, 1.03, 0.91},
		{stream{flows: 100}, 1.03, 0.93},
		{stream{flows: 5, big: true}, 1.03, 0.91},
		{stream{flows: 3, zero: true}, 10, 0.2},
	} {
		r := rand.New(rand.NewPCG(3, 4))
		in := c.s.gen(r, 20000)
		out := frame(t, in)
		ours := float64(len(out)) / float64(len(in))
		theirs := float64(len(lib.EncodeAll(in, nil))) / float64(len(in))
		t.Logf("%+v: ours %.4f of the input, the library's level 1 %.4f", c.s, ours, theirs)
		if ours > c.vsSelf || ours > c.vsLib*theirs {
			t.Errorf("%+v: %.4f of the input (the library's %.4f), want at most %.2f and %.2fx the library's", c.s, ours, theirs, c.vsSelf, c.vsLib)
		}
	}
}

func ExampleEncoder() {
	var out bytes.Buffer
	e := NewEncoder(&out)
	e.Write([]byte("any bytes, pcapng or not"))
	e.Flush()
	e.Close()
	d, _ := zstd.NewReader(nil)
	b, _ := d.DecodeAll(out.Bytes(), nil)
	fmt.Println(string(b))
	// Output: any bytes, pcapng or not
}

// TestAllocs: once its buffers have grown, an Encoder writes, flushes,
// closes and starts frames without allocating.
func TestAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	in := stream{flows: 20}.gen(r, 20000)
	var c counter
	e := NewEncoder(&c)
	frame := func() {
		e.Reset(&c)
		for i := 0; i < len(in); i += 100_000 {
			e.Write(in[i:min(i+100_000, len(in))])
			if i%300_000 == 0 {
				e.Flush()
			}
		}
		e.Close()
	}
	frame()
	if n := testing.AllocsPerRun(5, frame); n != 0 {
		t.Fatalf("%.1f allocations a frame of %d bytes", n, len(in))
	}
}

// TestTurnsToText: a stream whose first packets are random and whose
// later ones carry text (judged flat at its start, compressed here to
// its end) still compresses the text: blocks whose bytes look like
// text are matched everywhere, within 1.35x of the library's level 1
// without Huffman coding (which has statistics-built code tables where
// this encoder has the predefined ones), whether or not the structure
// was lost before them.
func TestTurnsToText(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	text := stream{flows: 5, text: true}.gen(r, 20000)
	for name, in := range map[string][]byte{
		"in step":            append(stream{flows: 5}.gen(r, 300), text...),
		"the structure lost": append(stream{flows: 5}.gen(r, 300), text[100:]...),
	} {
		out := frame(t, in)
		if got := decode(t, out); !bytes.Equal(got, in) {
			t.Fatalf("%s: the frame does not decode to its input", name)
		}
		lib, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(Window), zstd.WithNoEntropyCompression(true))
		if err != nil {
			t.Fatal(err)
		}
		ours := float64(len(out)) / float64(len(in))
		theirs := float64(len(lib.EncodeAll(in, nil))) / float64(len(in))
		t.Logf("%s: ours %.4f of the input, the library's %.4f", name, ours, theirs)
		if ours > 1.35*theirs {
			t.Errorf("%s: %.4f of the input, the library's %.4f: want at most 1.35x", name, ours, theirs)
		}
	}
}

// frame is in written whole as one frame.
func frame(t *testing.T, in []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	e := NewEncoder(&out)
	if _, err := e.Write(in); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}
