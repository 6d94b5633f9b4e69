package pcapzstd

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

// FuzzEncode: any input, written in pieces the fuzzer chooses with
// flushes between some, decodes to itself, and after each flush the
// frame so far with an empty last block decodes to the input so far
// (checked at the first 4 flushes: each check decodes it all). With the
// top bit of cuts the frame is one the library's encoder began (on
// text) and flushed, which this encoder continues (Continue): then it
// decodes to that text and the input.
// The seeds are pcapng (both byte orders, lengths that lie), so the
// fuzzer starts from the structure the matcher follows.
func FuzzEncode(f *testing.F) {
	ngstream.AddSeeds(f)
	r := rand.New(rand.NewPCG(1, 2))
	f.Add(ngstream.Stream{Flows: 2}.Gen(r, 20), uint64(1<<63|0x0102030405060708)) // continued
	lib, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithWindowSize(Window))
	if err != nil {
		f.Fatal(err)
	}
	text := bytes.Repeat([]byte("GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n"), 40)
	f.Fuzz(func(t *testing.T, in []byte, cuts uint64) {
		in = in[:min(len(in), 1<<18)] // a few blocks are enough
		checks := 0
		var out bytes.Buffer
		e := NewEncoder(&out)
		var head []byte
		if cuts>>63 == 1 {
			head = text
			lib.Reset(&out)
			lib.Write(head)
			if err := lib.Flush(); err != nil {
				t.Fatal(err)
			}
			e.Continue(&out)
		}
		want := append(bytes.Clone(head), in...)
		pos := 0
		for k := 0; pos < len(in); k++ {
			n := min(len(in)-pos, 1+int(cuts>>(8*(k%8))&0xff)*64)
			if _, err := e.Write(in[pos : pos+n]); err != nil {
				t.Fatal(err)
			}
			pos += n
			if (cuts>>(k%63))&1 == 1 {
				if err := e.Flush(); err != nil {
					t.Fatal(err)
				}
				if checks++; out.Len() > 0 && checks <= 4 {
					checkCut(t, out.Bytes(), want[:len(head)+pos])
				}
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if got := decode(t, out.Bytes()); !bytes.Equal(got, want) {
			t.Fatalf("decoded %d bytes, not the %d written", len(got), len(want))
		}
	})
}
