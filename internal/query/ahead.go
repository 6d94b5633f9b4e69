package query

import (
	"io"
	"sync"
)

// Read-ahead (Config.Threads above 1): a file's decoded stream (its
// data read, decompressed and spliced to the blocks selected) is read
// by a goroutine of its own into chunks that the stream's pcapng reader
// then reads, so that reading and decompressing go on beside the merge.
// aheadChunk is the size of a chunk of read-ahead (a variable for
// tests).
var aheadChunk = 256 << 10

const (
	// aheadChunks is how many chunks a stream reads ahead at most: the
	// read-ahead of a stream holds at most aheadChunks*aheadChunk
	// bytes (1 MiB), allocated as needed once per stream and reused.
	aheadChunks = 4
)

// testAhead, nil outside tests, runs when a read-ahead chunk is filled,
// with how many chunks of the stream are filled and not yet read.
var testAhead func(filled int)

// chunk is a piece of a file's decoded stream: b then, once b is read,
// err (io.EOF at its end).
type chunk struct {
	b   []byte
	err error
}

// aheadKit is a stream's read-ahead buffers and the query's limit on
// the reads going on at once.
type aheadKit struct {
	sem  chan struct{} // a token per read at once, shared by the query
	free chan []byte   // the stream's chunk buffers not in use
}

func newAheadKit(sem chan struct{}) *aheadKit {
	k := &aheadKit{sem: sem, free: make(chan []byte, aheadChunks)}
	for range aheadChunks {
		k.free <- nil // made when first used
	}
	return k
}

// ahead is an io.Reader of what a goroutine reads ahead from src.
// Close it (it stops and waits for the goroutine) before src is used
// or counted again.
type ahead struct {
	k    *aheadKit
	full chan chunk
	stop chan struct{}
	wg   sync.WaitGroup
	cur  chunk
	buf  []byte // the buffer of cur, given back once read
	mu   sync.Mutex
	n    int // chunks filled and not yet taken (tests)
}

func newAhead(src io.Reader, k *aheadKit) *ahead {
	a := &ahead{k: k, full: make(chan chunk, aheadChunks), stop: make(chan struct{})}
	a.wg.Add(1)
	go a.run(src)
	return a
}

// run reads src into chunks until its end, an error or Close.
func (a *ahead) run(src io.Reader) {
	defer a.wg.Done()
	for {
		var b []byte
		select {
		case b = <-a.k.free:
		case <-a.stop:
			return
		}
		if b == nil {
			b = make([]byte, aheadChunk)
		}
		select {
		case a.k.sem <- struct{}{}:
		case <-a.stop:
			a.k.free <- b
			return
		}
		n, err := io.ReadFull(src, b[:aheadChunk])
		<-a.k.sem
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if testAhead != nil {
			a.mu.Lock()
			a.n++
			testAhead(a.n)
			a.mu.Unlock()
		}
		select {
		case a.full <- chunk{b: b[:n], err: err}:
		case <-a.stop:
			a.k.free <- b
			return
		}
		if err != nil {
			return
		}
	}
}

func (a *ahead) Read(p []byte) (int, error) {
	for len(a.cur.b) == 0 {
		if a.cur.err != nil {
			return 0, a.cur.err
		}
		if a.buf != nil {
			a.k.free <- a.buf
			a.buf = nil
		}
		a.cur = <-a.full
		a.buf = a.cur.b[:0]
		if testAhead != nil {
			a.mu.Lock()
			a.n--
			a.mu.Unlock()
		}
	}
	n := copy(p, a.cur.b)
	a.cur.b = a.cur.b[n:]
	return n, nil
}

// Close stops the goroutine, waits for it and gives the buffers back.
func (a *ahead) Close() {
	close(a.stop)
	a.wg.Wait()
	if a.buf != nil {
		a.k.free <- a.buf
		a.buf = nil
	}
	for {
		select {
		case c := <-a.full:
			a.k.free <- c.b[:0]
		default:
			a.cur = chunk{err: io.ErrClosedPipe}
			return
		}
	}
}
