package pcapflate

import (
	"bytes"
	"testing"

	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

// FuzzEncode: any input, written in pieces the fuzzer chooses, as
// members ending where it chooses, inflates to itself. The seeds are
// pcapng (both byte orders, lengths that lie), so the fuzzer starts from
// the structure the matcher follows.
func FuzzEncode(f *testing.F) {
	ngstream.AddSeeds(f)
	f.Fuzz(func(t *testing.T, in []byte, cuts uint64) {
		in = in[:min(len(in), 1<<18)]
		var out bytes.Buffer
		e := NewEncoder(&out)
		pos := 0
		for k := 0; pos < len(in); k++ {
			n := min(len(in)-pos, 1+int(cuts>>(8*(k%8))&0xff)*64)
			if _, err := e.Write(in[pos : pos+n]); err != nil {
				t.Fatal(err)
			}
			pos += n
			if (cuts>>(k%64))&1 == 1 {
				if err := e.Close(); err != nil {
					t.Fatal(err)
				}
				e.Reset(&out)
			}
		}
		if err := e.Close(); err != nil {
			t.Fatal(err)
		}
		if got := decode(t, out.Bytes()); !bytes.Equal(got, in) {
			t.Fatalf("inflated %d bytes, not the %d written", len(got), len(in))
		}
	})
}
