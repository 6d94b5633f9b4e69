package store

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

// recordingWriter takes what it is given, and fails from failAt bytes
// on (0: never).
type recordingWriter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	failAt int
	calls  int
}

var errTestWrite = errors.New("test write error")

func (r *recordingWriter) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.failAt > 0 && r.buf.Len()+len(p) > r.failAt {
		return 0, errTestWrite
	}
	return r.buf.Write(p)
}

// TestAheadWriter: what is written reaches the encoder in order, in
// chunks of at most aheadChunk, once Wait returns; an error of the
// encoder is returned by a later Write or Wait, and the bytes queued
// behind it are dropped, until Reset.
func TestAheadWriter(t *testing.T) {
	var want []byte
	for i := 0; len(want) < 5*aheadChunk+12345; i++ {
		want = append(want, byte(i), byte(i>>8), byte(i>>16))
	}
	for _, step := range []int{1, 100, 64 << 10, aheadChunk, aheadChunk + 1, 3 * aheadChunk} {
		rw := &recordingWriter{}
		a := newAheadWriter(rw)
		for off := 0; off < len(want); off += step {
			if _, err := a.Write(want[off:min(off+step, len(want))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Wait(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rw.buf.Bytes(), want) {
			t.Fatalf("writes of %d: the encoder got %d bytes, not the %d written in order", step, rw.buf.Len(), len(want))
		}
		if min := (len(want) + aheadChunk - 1) / aheadChunk; step >= aheadChunk && rw.calls != min {
			t.Fatalf("writes of %d: %d handoffs, want %d", step, rw.calls, min)
		}
	}

	rw := &recordingWriter{failAt: 2*aheadChunk + 10}
	a := newAheadWriter(rw)
	var err error
	for off := 0; off < len(want) && err == nil; off += 4096 {
		_, err = a.Write(want[off:min(off+4096, len(want))])
	}
	if werr := a.Wait(); !errors.Is(werr, errTestWrite) || err != nil && !errors.Is(err, errTestWrite) {
		t.Fatalf("Write returned %v, Wait %v; want the encoder's error", err, werr)
	}
	if _, err := a.Write([]byte("more")); !errors.Is(err, errTestWrite) {
		t.Fatalf("a Write after the error returned %v", err)
	}
	if rw.buf.Len() != 2*aheadChunk {
		t.Fatalf("the encoder took %d bytes; want the %d before the failed chunk, nothing after", rw.buf.Len(), 2*aheadChunk)
	}
	next := &recordingWriter{}
	a.Reset(next)
	if _, err := a.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if err := a.Wait(); err != nil || next.buf.String() != "again" {
		t.Fatalf("after Reset: %v, %q", err, next.buf.String())
	}
}
