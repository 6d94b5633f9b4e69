package pcapflate

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os/exec"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

// encode writes in to an Encoder in random pieces, as members that end
// at random points (most at a pcapng block's start, as the store's
// commits are, some anywhere).
func encode(t testing.TB, r *rand.Rand, in []byte, members int) []byte {
	t.Helper()
	var out bytes.Buffer
	e := NewEncoder(&out)
	cuts := map[int]bool{}
	for range members - 1 {
		cuts[r.IntN(len(in))] = true
	}
	pos := 0
	for pos < len(in) {
		n := min(len(in)-pos, 1+r.IntN(300_000))
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
			e.Reset(&out)
		}
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// decode inflates every member of z with the standard library's gzip
// reader, which checks each member's CRC-32 and size and refuses a
// distance past the window.
func decode(t testing.TB, z []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("inflating: %v", err)
	}
	return got
}

// TestRoundTrip: every generated stream, in one member or several,
// written in random pieces, inflates to itself with the standard
// library's reader, klauspost's, and the gzip command (where installed).
func TestRoundTrip(t *testing.T) {
	gzipCmd, _ := exec.LookPath("gzip")
	ngstream.EachCase(t, func(t *testing.T, r *rand.Rand, in []byte, members int) {
		z := encode(t, r, in, members)
		if got := decode(t, z); !bytes.Equal(got, in) {
			t.Fatalf("inflated %d bytes, not the %d written", len(got), len(in))
		}
		kr, err := kgzip.NewReader(bytes.NewReader(z))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := io.ReadAll(kr); err != nil || !bytes.Equal(got, in) {
			t.Fatalf("klauspost's reader: %v, %d bytes of %d", err, len(got), len(in))
		}
		if gzipCmd != "" {
			cmd := exec.Command(gzipCmd, "-d", "-c")
			cmd.Stdin = bytes.NewReader(z)
			got, err := cmd.Output()
			if err != nil || !bytes.Equal(got, in) {
				t.Fatalf("gzip -d: %v, %d bytes of %d", err, len(got), len(in))
			}
		}
		t.Logf("%d -> %d bytes (%.3f), %d members", len(in), len(z), float64(len(z))/float64(len(in)), members)
	})
}

// TestEmpty: a member of nothing is a valid gzip member, and Write
// fails after Close.
func TestEmpty(t *testing.T) {
	var out bytes.Buffer
	e := NewEncoder(&out)
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if got := decode(t, out.Bytes()); len(got) != 0 {
		t.Fatalf("an empty member inflates to %d bytes", len(got))
	}
	if _, err := e.Write([]byte{1}); err != ErrClosed {
		t.Fatalf("Write after Close: %v, want ErrClosed", err)
	}
}

// TestWindow: matches reach no further than deflate's 32 KiB, however
// far back the same flow's last packet lies (the standard library's
// reader refuses a distance past the window).
func TestWindow(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	in := ngstream.Stream{Flows: 2}.Gen(r, 2000)
	var mid []byte // other blocks of 20-40 KiB between the flows' packets
	for len(mid) < 1<<20 {
		n := 20000 + 4*r.IntN(5000)
		mid = binary.LittleEndian.AppendUint32(mid, 0x0bad)
		mid = binary.LittleEndian.AppendUint32(mid, uint32(n+12))
		mid = append(mid, ngstream.Bytes(r, n)...)
		mid = binary.LittleEndian.AppendUint32(mid, uint32(n+12))
	}
	half := len(in) / 2
	for binary.LittleEndian.Uint32(in[half:]) != 6 || binary.LittleEndian.Uint32(in[half+4:])%4 != 0 {
		half++ // a block's start, most likely
	}
	all := append(append(append([]byte(nil), in[:half]...), mid...), in[half:]...)
	if got := decode(t, encode(t, r, all, 1)); !bytes.Equal(got, all) {
		t.Fatal("the member does not inflate to its input")
	}
}

// TestLongMatches: matches longer than deflate's 258 bytes (zero
// payloads agree to the block's end) are split into ones it can code,
// none shorter than 3.
func TestLongMatches(t *testing.T) {
	for _, n := range []int{258, 259, 260, 261, 516, 517, 518, 1000} {
		var out bytes.Buffer
		e := NewEncoder(&out)
		e.Write(make([]byte, 10))
		e.encode()
		e.match(n, 10)
		// The trailer of the bytes the match stands for.
		e.crc = crc32.ChecksumIEEE(make([]byte, 10+n))
		e.size = uint32(10 + n)
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if got := decode(t, out.Bytes()); !bytes.Equal(got, make([]byte, 10+n)) {
			t.Fatalf("a match of %d: inflated %d bytes, want %d zeros", n, len(got), 10+n)
		}
	}
}

// TestRatio: on packets with random payloads the members are within
// 8% of the size the library's fastest level makes them (both find the
// headers' repeats, and nothing else repeats), from one flow or many;
// and never more than 1% larger than the input.
func TestRatio(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 5))
	for _, s := range []ngstream.Stream{{Flows: 1}, {Flows: 100}, {Flows: 5, Big: true}, {Raw: true}} {
		in := s.Gen(r, 20000)
		var lib bytes.Buffer
		lw, _ := kgzip.NewWriterLevel(&lib, kgzip.BestSpeed)
		lw.Write(in)
		lw.Close()
		z := encode(t, r, in, 1)
		t.Logf("%+v: %d bytes -> %d (library's level 1: %d)", s, len(in), len(z), lib.Len())
		if float64(len(z)) > 1.08*float64(lib.Len()) || float64(len(z)) > 1.01*float64(len(in)) {
			t.Fatalf("%+v: %d bytes from %d, the library's level 1 %d", s, len(z), len(in), lib.Len())
		}
	}
}

// TestAllocs: once its buffers have grown, an Encoder writes, closes
// and starts members without allocating.
func TestAllocs(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 9))
	in := ngstream.Stream{Flows: 20}.Gen(r, 20000)
	e := NewEncoder(io.Discard)
	member := func() {
		e.Reset(io.Discard)
		for i := 0; i < len(in); i += 100_000 {
			e.Write(in[i:min(i+100_000, len(in))])
		}
		e.Close()
	}
	member()
	if n := testing.AllocsPerRun(5, member); n != 0 {
		t.Fatalf("%.1f allocations a member of %d bytes", n, len(in))
	}
}
