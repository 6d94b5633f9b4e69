package query

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// sizesWriter keeps what it is given and the size of each write.
type sizesWriter struct {
	buf   bytes.Buffer
	sizes []int
}

func (w *sizesWriter) Write(p []byte) (int, error) {
	w.sizes = append(w.sizes, len(p))
	return w.buf.Write(p)
}

// TestAsyncWriterGrows: what is written and reserved through an
// asyncWriter reaches w in order, byte for byte, with Flushes between;
// its writes are of outBuf until growAfter bytes were handed over, then
// of bigOutBuf.
func TestAsyncWriterGrows(t *testing.T) {
	w := &sizesWriter{}
	a := newAsyncWriter(w)
	defer a.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var want []byte
	for len(want) < growAfter+8*bigOutBuf {
		n := rng.IntN(3000)
		if rng.IntN(2) == 0 {
			b := a.Reserve(n)
			if b == nil {
				t.Fatalf("Reserve(%d) failed", n)
			}
			for i := range b {
				b[i] = byte(len(want) + i)
			}
			want = append(want, b...)
		} else {
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(len(want) + i)
			}
			if _, err := a.Write(p); err != nil {
				t.Fatal(err)
			}
			want = append(want, p...)
		}
		if rng.IntN(20000) == 0 {
			if err := a.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := a.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.buf.Bytes(), want) {
		t.Fatalf("w got %d bytes, not the %d written in order", w.buf.Len(), len(want))
	}
	var before, big int
	for _, n := range w.sizes[:len(w.sizes)-1] {
		switch {
		case before < growAfter && n > outBuf:
			t.Fatalf("a write of %d after %d bytes, before %d", n, before, growAfter)
		case n > bigOutBuf:
			t.Fatalf("a write of %d", n)
		case n > outBuf:
			big++
		}
		before += n
	}
	if big < 4 {
		t.Fatalf("%d writes above %d bytes after %d: the buffers did not grow", big, outBuf, growAfter)
	}
}
