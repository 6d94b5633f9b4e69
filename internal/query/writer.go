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

// vecMax is the most pieces a vecWriter hands writev at once (Linux's
// IOV_MAX); refMin the shortest packet whose data it writes by
// reference rather than copying (a piece costs the kernel about what
// copying that much does); refMax the most bytes a buffer references.
const (
	vecMax = 1024
	refMin = 256
	refMax = 1 << 20
)

// vecWriter is asyncWriter for an output that takes a list of pieces
// in one call (writev on a file or pipe): while refs is set, the
// packets' data given to WriteRef is not copied into its buffer but
// written from where it is, the pieces between copied into the buffer
// as before, so the data is copied once, by the kernel, as cat's is.
// The data must stay unchanged until written: the merge hands the
// batches that hold it to hold, and gets them back (given back to
// their producers) once the buffers that referred to them are written.
// Two buffers, as asyncWriter; each refers to at most refMax bytes.
type vecWriter struct {
	writev  func(iov [][]byte) error // writes all of iov
	cur     *vecBuf
	free    chan *vecBuf
	full    chan *vecBuf // nil: a Flush's marker, answered on synced
	synced  chan struct{}
	err     atomic.Pointer[error]
	wg      sync.WaitGroup
	refs    bool   // WriteRef may refer to the data
	seq     uint64 // the last buffer's number
	written uint64 // buffers numbered up to it are written
	held    []heldBatch
}

// vecBuf is a vecWriter's buffer: iov the pieces in order, slices of
// meta and the data referred to; meta[mark:] not in iov yet.
type vecBuf struct {
	meta []byte
	iov  [][]byte
	mark int
	refd int
	seq  uint64 // 0: never handed over
}

// heldBatch is a batch written by reference, to give back to its
// producer once the buffer numbered seq is written.
type heldBatch struct {
	p   *producer
	b   *batch
	seq uint64
}

func newVecWriter(writev func([][]byte) error) *vecWriter {
	nb := func() *vecBuf {
		return &vecBuf{meta: make([]byte, 0, outBuf), iov: make([][]byte, 0, vecMax)}
	}
	v := &vecWriter{writev: writev, cur: nb(), free: make(chan *vecBuf, 1),
		full: make(chan *vecBuf, 1), synced: make(chan struct{})}
	v.free <- nb()
	v.seq = 1
	v.cur.seq = 1
	v.wg.Add(1)
	go v.run()
	return v
}

func (v *vecWriter) run() {
	defer v.wg.Done()
	for b := range v.full {
		if b == nil {
			v.synced <- struct{}{}
			continue
		}
		if v.failed() == nil {
			if err := v.writev(b.iov); err != nil {
				v.err.Store(&err)
			}
		}
		clear(b.iov) // drop the references
		b.meta, b.iov, b.mark, b.refd = b.meta[:0], b.iov[:0], 0, 0
		v.free <- b
	}
}

func (v *vecWriter) failed() error {
	if e := v.err.Load(); e != nil {
		return *e
	}
	return nil
}

// handOver hands the buffer to the goroutine and takes the other one,
// giving back the batches held that are written by then.
func (v *vecWriter) handOver() error {
	b := v.cur
	if len(b.meta) > b.mark {
		b.iov = append(b.iov, b.meta[b.mark:])
	}
	v.full <- b
	v.cur = <-v.free
	if s := v.cur.seq; s > v.written {
		v.written = s
	}
	v.seq++
	v.cur.seq = v.seq
	v.release()
	return v.failed()
}

// room makes room for n bytes and pieces more pieces in the buffer.
func (v *vecWriter) room(n, pieces int) error {
	b := v.cur
	if n > cap(b.meta)-len(b.meta) || len(b.iov)+pieces > vecMax {
		return v.handOver()
	}
	return nil
}

// Write copies p into the buffers, handing each full one over; it
// returns the output's error once known (at a hand-over).
func (v *vecWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		b := v.cur
		if len(b.meta) == cap(b.meta) || len(b.iov)+2 > vecMax {
			if err := v.handOver(); err != nil {
				return n - len(p), err
			}
			b = v.cur
		}
		c := copy(b.meta[len(b.meta):cap(b.meta)], p)
		b.meta = b.meta[:len(b.meta)+c]
		p = p[c:]
	}
	return n, nil
}

// WriteRef writes head, data and tail (pcapfile.Referrer): data by
// reference while refs is set and it is refMin bytes or more, else
// copied.
func (v *vecWriter) WriteRef(head, data, tail []byte) error {
	if !v.refs || len(data) < refMin {
		n := len(head) + len(data) + len(tail)
		if n > outBuf {
			for _, p := range [][]byte{head, data, tail} {
				if _, err := v.Write(p); err != nil {
					return err
				}
			}
			return nil
		}
		if err := v.room(n, 2); err != nil {
			return err
		}
		b := v.cur
		b.meta = append(append(append(b.meta, head...), data...), tail...)
		return nil
	}
	if err := v.room(len(head)+len(tail), 3); err != nil {
		return err
	}
	b := v.cur
	b.meta = append(b.meta, head...)
	b.iov = append(b.iov, b.meta[b.mark:], data)
	b.mark = len(b.meta)
	b.meta = append(b.meta, tail...)
	b.refd += len(data)
	if b.refd >= refMax {
		return v.handOver()
	}
	return nil
}

// hold keeps p's batch b, written by reference, until the buffer now
// filled is written; it is then given back to p.
func (v *vecWriter) hold(p *producer, b *batch) {
	p.held++
	v.held = append(v.held, heldBatch{p: p, b: b, seq: v.cur.seq})
}

// release gives back the batches held whose buffers are written.
func (v *vecWriter) release() {
	i := 0
	for ; i < len(v.held) && v.held[i].seq <= v.written; i++ {
		h := &v.held[i]
		h.p.held--
		h.p.back <- h.b // never blocks: it holds every batch
		*h = heldBatch{}
	}
	if i > 0 {
		n := copy(v.held, v.held[i:])
		v.held = v.held[:n]
	}
}

// drain writes out what is buffered, waits until it is written and
// gives back every batch held.
func (v *vecWriter) drain() error {
	err := v.Flush()
	v.written = v.cur.seq - 1
	v.release()
	return err
}

// Flush writes out what is buffered and waits until it is written.
func (v *vecWriter) Flush() error {
	if len(v.cur.meta) > 0 || len(v.cur.iov) > 0 {
		v.handOver() // its error is failed's, below
	}
	v.full <- nil
	<-v.synced
	return v.failed()
}

// Close stops the goroutine (what was not flushed is dropped).
func (v *vecWriter) Close() {
	close(v.full)
	v.wg.Wait()
}

// advance drops the first n bytes of bufs' pieces.
func advance(bufs [][]byte, n int) [][]byte {
	for len(bufs) > 0 && n >= len(bufs[0]) {
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	if len(bufs) > 0 {
		bufs[0] = bufs[0][n:]
	}
	return bufs
}
