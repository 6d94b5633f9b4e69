package query

import (
	"io"
	"sync"
	"sync/atomic"
)

// outBuf is the size of each output buffer.
const outBuf = 256 << 10

// flusher is the output's buffer: a bufio.Writer, or an asyncWriter
// when the query has threads to spare.
type flusher interface {
	io.Writer
	Flush() error
}

// asyncWriter buffers what is written to it in outBuf buffers and
// writes each full one to w from a goroutine of its own, so that the
// merge fills the next while the last is written. Two buffers: the
// one filled, the one written; its memory is 2*outBuf. An error of w
// is returned by the Write or Flush after it, and everything written
// after it is dropped. Close it once done with it.
type asyncWriter struct {
	w    io.Writer
	buf  []byte
	free chan []byte
	full chan []byte // nil: a Flush's marker, answered on synced
	sync chan struct{}
	err  atomic.Pointer[error] // w's first error
	wg   sync.WaitGroup
}

func newAsyncWriter(w io.Writer) *asyncWriter {
	a := &asyncWriter{w: w, buf: make([]byte, 0, outBuf), free: make(chan []byte, 1),
		full: make(chan []byte, 1), sync: make(chan struct{})}
	a.free <- make([]byte, 0, outBuf)
	a.wg.Add(1)
	go a.run()
	return a
}

func (a *asyncWriter) run() {
	defer a.wg.Done()
	for b := range a.full {
		if b == nil {
			a.sync <- struct{}{}
			continue
		}
		if a.failed() == nil {
			n, err := a.w.Write(b)
			if err == nil && n < len(b) {
				err = io.ErrShortWrite
			}
			if err != nil {
				a.err.Store(&err)
			}
		}
		a.free <- b[:0]
	}
}

func (a *asyncWriter) failed() error {
	if e := a.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Write copies p into the buffers, handing each full one to the
// goroutine; it returns w's error once known (at a buffer's hand-over).
func (a *asyncWriter) Write(p []byte) (int, error) {
	if len(p) <= cap(a.buf)-len(a.buf) {
		a.buf = append(a.buf, p...)
		return len(p), nil
	}
	n := len(p)
	for len(p) > 0 {
		if len(a.buf) == cap(a.buf) {
			a.full <- a.buf
			a.buf = <-a.free
			if err := a.failed(); err != nil {
				return n - len(p), err
			}
		}
		c := copy(a.buf[len(a.buf):cap(a.buf)], p)
		a.buf = a.buf[:len(a.buf)+c]
		p = p[c:]
	}
	return n, nil
}

// Reserve returns the next n bytes of the buffer, counted as written,
// handing the buffer over first if they do not fit (pcapfile.Reserver);
// nil when n exceeds a buffer or w failed (Write then says why).
func (a *asyncWriter) Reserve(n int) []byte {
	if n > cap(a.buf)-len(a.buf) {
		if n > outBuf {
			return nil
		}
		a.full <- a.buf
		a.buf = <-a.free
		if a.failed() != nil {
			return nil
		}
	}
	l := len(a.buf)
	a.buf = a.buf[:l+n]
	return a.buf[l : l+n : l+n]
}

// Flush writes out what is buffered and waits until it is written.
func (a *asyncWriter) Flush() error {
	if len(a.buf) > 0 {
		a.full <- a.buf
		a.buf = <-a.free
	}
	a.full <- nil
	<-a.sync
	return a.failed()
}

// Close stops the goroutine (what was not flushed is dropped).
func (a *asyncWriter) Close() {
	close(a.full)
	a.wg.Wait()
}
