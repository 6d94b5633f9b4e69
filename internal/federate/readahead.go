package federate

import "io"

// Read-ahead of a server's answer: readaheadChunks chunks of
// readaheadChunk bytes, so that a server goes on sending while the
// merge waits on another, up to this much.
const (
	readaheadChunk  = 256 << 10
	readaheadChunks = 4
)

// readahead reads src on its own goroutine into a bounded number of
// chunks, which Read gives out in order: a server's bytes come in
// while the merge writes the others'. The goroutine ends at src's end
// or error, or when quit is closed.
type readahead struct {
	full chan []byte // chunks read, in order; closed after the last
	free chan []byte // chunks given back
	quit chan struct{}
	err  error  // src's error (io.EOF at its end), once full is closed
	cur  []byte // the unread rest of the chunk being read
	held []byte // that chunk, given back once read
}

func newReadahead(src func([]byte) (int, error)) *readahead {
	r := &readahead{full: make(chan []byte, readaheadChunks), free: make(chan []byte, readaheadChunks), quit: make(chan struct{})}
	for range readaheadChunks {
		r.free <- make([]byte, readaheadChunk)
	}
	go r.fill(src)
	return r
}

func (r *readahead) fill(src func([]byte) (int, error)) {
	defer close(r.full)
	for {
		var b []byte
		select {
		case b = <-r.free:
		case <-r.quit:
			r.err = io.ErrClosedPipe
			return
		}
		n, err := src(b[:cap(b)])
		if n > 0 {
			select {
			case r.full <- b[:n]:
			case <-r.quit:
				r.err = io.ErrClosedPipe
				return
			}
		} else {
			r.free <- b
		}
		if err != nil {
			r.err = err
			return
		}
	}
}

// Read gives out the bytes read ahead; at their end src's error.
func (r *readahead) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.held != nil {
			r.free <- r.held
			r.held = nil
		}
		b, ok := <-r.full
		if !ok {
			return 0, r.err
		}
		r.cur, r.held = b, b
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// close ends the goroutine (once src's read in progress returns).
func (r *readahead) close() { close(r.quit) }
