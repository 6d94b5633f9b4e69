package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// limitedDst takes at most max bytes a Write (a short write beyond,
// with no error when short is set) and fails every Write once it has
// taken failAt bytes.
type limitedDst struct {
	got    bytes.Buffer
	max    int
	short  bool
	failAt int
}

var errDstFull = errors.New("destination full")

func (d *limitedDst) Write(p []byte) (int, error) {
	if d.got.Len() >= d.failAt {
		return 0, errDstFull
	}
	n := min(len(p), d.max, d.failAt-d.got.Len())
	d.got.Write(p[:n])
	switch {
	case n < len(p) && d.got.Len() >= d.failAt:
		return n, errDstFull
	case n < len(p) && !d.short:
		return n, fmt.Errorf("short: %w", errDstFull)
	}
	return n, nil
}

// TestFileBufAsBufio: fileBuf does what bufio.Writer does, given the
// same writes and flushes (a Reserve filled at once standing for a
// flush if its bytes do not fit, then a Write of them): the same bytes
// reach the destination, the same
// counts, errors and Buffered, over destinations that take everything,
// write short, and fail part way.
func TestFileBufAsBufio(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for round := range 400 {
		size := []int{16, 100, 4096}[round%3]
		mk := func() *limitedDst {
			return &limitedDst{max: 1 + round%7*50, short: round%2 == 0, failAt: 1 << 30}
		}
		da, db := mk(), mk()
		if round%4 == 0 {
			da.failAt = rng.IntN(5 * size)
			db.failAt = da.failAt
		}
		if round%5 == 0 {
			da.max, db.max = 1<<30, 1<<30
		}
		fb, bw := newFileBuf(size), bufio.NewWriterSize(db, size)
		fb.Reset(da)
		for op := range 60 {
			switch k := rng.IntN(10); {
			case k < 5:
				p := make([]byte, rng.IntN(2*size+1))
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				n1, e1 := fb.Write(p)
				n2, e2 := bw.Write(p)
				if n1 != n2 || (e1 == nil) != (e2 == nil) {
					t.Fatalf("round %d op %d: Write(%d) = %d, %v; bufio %d, %v", round, op, len(p), n1, e1, n2, e2)
				}
			case k < 8:
				n := 1 + rng.IntN(size)
				if n > bw.Available() {
					bw.Flush() // Reserve flushes first what it does not fit after
				}
				if r := fb.Reserve(n); r != nil {
					for i := range r {
						r[i] = byte(rng.Uint32())
					}
					if n2, e2 := bw.Write(r); n2 != n || e2 != nil {
						t.Fatalf("round %d op %d: Reserve(%d) given, bufio's Write: %d, %v", round, op, n, n2, e2)
					}
				} else if _, e2 := bw.Write(make([]byte, n)); e2 == nil {
					t.Fatalf("round %d op %d: Reserve(%d) refused where bufio's Write succeeded", round, op, n)
				}
			default:
				e1, e2 := fb.Flush(), bw.Flush()
				if (e1 == nil) != (e2 == nil) {
					t.Fatalf("round %d op %d: Flush = %v; bufio %v", round, op, e1, e2)
				}
			}
			if fb.Buffered() != bw.Buffered() || !bytes.Equal(da.got.Bytes(), db.got.Bytes()) {
				t.Fatalf("round %d op %d: buffered %d, %d bytes out; bufio %d, %d", round, op, fb.Buffered(), da.got.Len(), bw.Buffered(), db.got.Len())
			}
		}
	}
}
