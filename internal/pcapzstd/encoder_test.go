package pcapzstd

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

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

// checkCut: the frame written so far, ended with an empty last block
// (what a store's repair appends after a crash), decodes to want.
func checkCut(t *testing.T, frame, want []byte) {
	t.Helper()
	if got := decode(t, append(bytes.Clone(frame), emptyLast[:]...)); !bytes.Equal(got, want) {
		t.Fatalf("the frame cut at a flush decodes to %d bytes, not the %d written so far", len(got), len(want))
	}
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
	ngstream.EachCase(t, func(t *testing.T, r *rand.Rand, in []byte, frames int) {
		z := encode(t, r, in, frames)
		if got := decode(t, z); !bytes.Equal(got, in) {
			t.Fatalf("decoded %d bytes, not the %d written", len(got), len(in))
		}
		if zstdCmd != "" {
			cmd := exec.Command(zstdCmd, "-d", "-c", "-q")
			cmd.Stdin = bytes.NewReader(z)
			got, err := cmd.Output()
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("zstd -d: %v, %d bytes of %d", err, len(got), len(in))
			}
		}
		t.Logf("%d -> %d bytes (%.3f), %d frames", len(in), len(z), float64(len(z))/float64(len(in)), frames)
	})
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
	in := ngstream.Stream{Flows: 2}.Gen(r, 2000)
	// Push the second flow's packets apart with 3 MiB of other blocks.
	var mid []byte
	for len(mid) < 3<<20 {
		mid = binary.LittleEndian.AppendUint32(mid, 0x0bad)
		mid = binary.LittleEndian.AppendUint32(mid, 65536)
		mid = append(mid, ngstream.Bytes(r, 65524)...)
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
		s      ngstream.Stream
		vsLib  float64 // at most this times the library's size
		vsSelf float64 // at most this share of the input
	}{
		{ngstream.Stream{Flows: 1}, 1.03, 0.91},
		{ngstream.Stream{Flows: 100}, 1.03, 0.93},
		{ngstream.Stream{Flows: 5, Big: true}, 1.03, 0.91},
		{ngstream.Stream{Flows: 3, Zero: true}, 10, 0.2},
	} {
		r := rand.New(rand.NewPCG(3, 4))
		in := c.s.Gen(r, 20000)
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
	in := ngstream.Stream{Flows: 20}.Gen(r, 20000)
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
	text := ngstream.Stream{Flows: 5, Text: true}.Gen(r, 20000)
	for name, in := range map[string][]byte{
		"in step":            append(ngstream.Stream{Flows: 5}.Gen(r, 300), text...),
		"the structure lost": append(ngstream.Stream{Flows: 5}.Gen(r, 300), text[100:]...),
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

// TestContinue: a frame that the library's encoder started (on text)
// and flushed, continued by this encoder with a stream of every kind in
// random pieces and flushes, decodes to all of its input with the
// klauspost decoder and zstd's own, and, cut at a flush (the first
// three) and ended with an empty last block, to the input so far. No
// sequence relies on the library's repeat offsets, which this encoder
// does not know (the text and zero payloads are matched everywhere,
// the last distance first). From the handover on the heads' matches
// are found: random payloads come out at most 0.93 of their size.
func TestContinue(t *testing.T) {
	zstdCmd, _ := exec.LookPath("zstd")
	lib, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithWindowSize(Window))
	if err != nil {
		t.Fatal(err)
	}
	e := NewEncoder(nil)
	// continued returns the frame of head (the library's) and in (this
	// encoder's), and the size of the library's part.
	continued := func(t *testing.T, r *rand.Rand, head, in []byte) ([]byte, int) {
		var out bytes.Buffer
		lib.Reset(&out)
		if _, err := lib.Write(head); err != nil {
			t.Fatal(err)
		}
		if err := lib.Flush(); err != nil || out.Len() == 0 {
			t.Fatalf("the library's flush: %v, %d bytes", err, out.Len())
		}
		libLen := out.Len()
		all := append(bytes.Clone(head), in...)
		e.Continue(&out)
		checks := 0
		for pos := 0; pos < len(in); {
			n := min(1+r.IntN(200_000), len(in)-pos)
			if _, err := e.Write(in[pos : pos+n]); err != nil {
				t.Fatal(err)
			}
			pos += n
			if r.IntN(3) == 0 {
				if err := e.Flush(); err != nil {
					t.Fatal(err)
				}
				if checks++; checks > 3 {
					continue // each check decodes it all: the first three flushes
				}
				checkCut(t, out.Bytes(), all[:len(head)+pos])
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if got := decode(t, out.Bytes()); !bytes.Equal(got, all) {
			t.Fatalf("decoded %d bytes, not the %d written", len(got), len(all))
		}
		if zstdCmd != "" {
			cmd := exec.Command(zstdCmd, "-d", "-c", "-q")
			cmd.Stdin = bytes.NewReader(out.Bytes())
			if got, err := cmd.Output(); err != nil || !bytes.Equal(got, all) {
				t.Fatalf("zstd -d: %v, %d bytes of %d", err, len(got), len(all))
			}
		}
		return out.Bytes(), libLen
	}
	// A stream of each kind (TestRoundTrip writes four of each).
	for name, c := range ngstream.Cases {
		t.Run(name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(9, 7))
			head := ngstream.Stream{Flows: 3, Text: true}.Gen(r, 200+r.IntN(2000))
			continued(t, r, head, c.Gen(r, 3000+r.IntN(10000)))
		})
	}
	r := rand.New(rand.NewPCG(5, 6))
	head := ngstream.Stream{Flows: 3, Text: true}.Gen(r, 1000)
	in := ngstream.Stream{Flows: 20}.Gen(r, 20000)
	z, libLen := continued(t, r, head, in)
	if share := float64(len(z)-libLen) / float64(len(in)); share > 0.93 {
		t.Fatalf("the continued part is %.4f of its input: want the heads' matches found (at most 0.93)", share)
	} else {
		t.Logf("the library's part %d bytes, the continued part %.4f of its input", libLen, share)
	}
}
