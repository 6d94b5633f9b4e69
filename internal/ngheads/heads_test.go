package ngheads

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// record keeps the runs a Finder reports.
type record []string

func (r *record) Run(emitted, i, j, dist int64) {
	*r = append(*r, fmt.Sprint(emitted, i, j, dist))
}

// bytewise is runs' definition, one byte at a time: every maximal
// stretch of agreeing bytes that starts in [from, stop) (at from, or
// after a byte that differs), extended up to limit, reported when it is
// at least MinMatch long.
func bytewise(h []byte, dist, from, stop, limit, emitted int64, s Sink) int64 {
	for i := from; i < stop; {
		if h[i] != h[i-dist] {
			i++
			continue
		}
		j := i
		for j < limit && h[j] == h[j-dist] {
			j++
		}
		if j-i >= MinMatch {
			s.Run(emitted, i, j, dist)
			emitted = j
		}
		i = j
	}
	return emitted
}

// TestRunsAsBytewise: the word-at-a-time runs reports what the
// byte-at-a-time definition does, on 300 000 random cases: bytes from
// alphabets of 2 to 256 symbols (so that runs of every length occur),
// any distance, start, stop and limit.
func TestRunsAsBytewise(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for n := range 300_000 {
		h := make([]byte, 40+r.IntN(300))
		k := []int{2, 3, 4, 256}[n%4]
		for i := range h {
			h[i] = byte(r.IntN(k))
		}
		dist := int64(1 + r.IntN(20))
		from := dist + int64(r.IntN(10))
		limit := from + int64(r.IntN(len(h)-int(from)))
		stop := from + int64(r.IntN(int(limit-from)+1))
		emitted := from - int64(r.IntN(int(from-dist)+1))
		var want, got record
		e1 := bytewise(h, dist, from, stop, limit, emitted, &want)
		e2 := runs(h, 0, dist, from, stop, limit, emitted, &got)
		if e1 != e2 || fmt.Sprint(want) != fmt.Sprint(got) {
			t.Fatalf("dist %d, from %d, stop %d, limit %d:\nbytewise %d %v\nruns     %d %v\nbytes %v",
				dist, from, stop, limit, e1, want, e2, got, h[from-dist:limit])
		}
	}
}
