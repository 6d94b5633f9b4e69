package store

import (
	"io"
	"sync"
)

// aheadChunk is the size of the chunks an aheadWriter hands its
// goroutine: the store's write buffer (getBuf) passes its whole 1 MiB
// at a time, so a chunk is one handoff per MiB.
const aheadChunk = 1 << 20

// aheadChunks is how many chunks an aheadWriter holds at most: one
// being compressed and one filled behind it. Write waits beyond that.
const aheadChunks = 2

// aheadWriter compresses off its caller's goroutine: Write copies p into
// chunks and returns, and a goroutine of its own, started at the first
// full chunk and ending at Stop (when its file is closed or parked),
// writes them to the encoder (w) in order. So a connection's compression runs beside its parsing,
// indexing and pcapng building, on another core, with one handoff a MiB
// (the encoder's own concurrency hands over every 64 KiB block, and on
// two cores those handoffs cost more than they gained: BENCHMARKS.md
// "Issue 30: zstd files"). It holds at most aheadChunks chunks (2 MiB),
// made when first needed and kept, as the encoder keeps its buffers,
// across the agent's files.
//
// Write hands a chunk over once it is full, so the handoffs are one a
// MiB whatever the sizes written; Wait hands over the rest. Wait
// returns once every chunk written is in the encoder, with the
// first error the encoder returned; the caller must Wait before it
// uses the encoder itself (flush, close, reset, options), and before it
// changes w. After an error every later Write fails with it, and the
// chunks still queued are dropped, until Reset. Write, Wait and Reset
// are called from one goroutine at a time (the Writer's lock).
type aheadWriter struct {
	w io.Writer // the encoder; set by the caller between Waits

	mu      sync.Mutex
	done    sync.Cond            // for the caller: a chunk was written, or the goroutine ended
	work    sync.Cond            // for the goroutine: chunks were handed over, or quit
	queue   [aheadChunks]*[]byte // chunks not yet written to w, oldest at head
	head, n int                  // the ring's first chunk and its length
	ready   int                  // of them, the first ready ones are full (or flushed): the goroutine's
	free    []*[]byte            // chunks written, to be filled again
	running bool                 // the goroutine is started and has not ended
	writing bool                 // the goroutine is writing the chunk at head
	quit    bool                 // the goroutine is to end
	fed     int64                // bytes written to w since Reset
	err     error                // the encoder's first error
}

func newAheadWriter(w io.Writer) *aheadWriter {
	a := &aheadWriter{w: w}
	a.done.L, a.work.L = &a.mu, &a.mu
	return a
}

// Write queues a copy of p for the encoder: it fills the newest chunk
// until it is full, then hands it to the goroutine.
func (a *aheadWriter) Write(p []byte) (int, error) {
	n := len(p)
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(p) > 0 {
		if a.err != nil {
			return 0, a.err
		}
		if a.ready == a.n { // no chunk being filled: take one
			for a.n == aheadChunks && a.err == nil {
				a.done.Wait()
			}
			if a.err != nil {
				return 0, a.err
			}
			var c *[]byte
			if k := len(a.free); k > 0 {
				c, a.free = a.free[k-1], a.free[:k-1]
			} else {
				b := make([]byte, 0, aheadChunk)
				c = &b
			}
			*c = (*c)[:0]
			a.queue[(a.head+a.n)%aheadChunks] = c
			a.n++
		}
		c := a.queue[(a.head+a.n-1)%aheadChunks]
		k := min(len(p), cap(*c)-len(*c))
		*c = append(*c, p[:k]...)
		p = p[k:]
		if len(*c) == cap(*c) {
			a.hand()
		}
	}
	return n, nil
}

// hand gives every queued chunk to the goroutine, starting it if it is
// not running. a.mu is held.
func (a *aheadWriter) hand() {
	a.ready = a.n
	switch {
	case a.ready == 0:
	case !a.running:
		a.running = true
		go a.run()
	default:
		a.work.Signal()
	}
}

// run writes the chunks handed to it to the encoder, in order, until
// told to quit.
func (a *aheadWriter) run() {
	a.mu.Lock()
	for {
		if a.ready == 0 {
			if a.quit {
				break
			}
			a.work.Wait()
			continue
		}
		c := a.queue[a.head]
		w, failed := a.w, a.err != nil
		a.writing = true
		a.mu.Unlock()
		var err error
		if !failed {
			_, err = w.Write(*c)
		}
		a.mu.Lock()
		a.writing = false
		if err != nil && a.err == nil {
			a.err = err
		}
		if !failed {
			a.fed += int64(len(*c))
		}
		a.queue[a.head] = nil
		a.head, a.n, a.ready = (a.head+1)%aheadChunks, a.n-1, a.ready-1
		a.free = append(a.free, c)
		a.done.Broadcast()
	}
	a.running, a.quit = false, false
	a.done.Broadcast()
	a.mu.Unlock()
}

// Wait hands over the chunk being filled, waits until every chunk is
// written to the encoder (or dropped after an error) and returns the
// encoder's first error.
func (a *aheadWriter) Wait() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wait()
	return a.err
}

// wait is Wait with a.mu held.
func (a *aheadWriter) wait() {
	a.hand()
	for a.ready > 0 || a.writing {
		a.done.Wait()
	}
}

// pending returns the bytes written to the aheadWriter and not yet to
// w, and those written to w since Reset.
func (a *aheadWriter) pending() (held, fed int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range a.n {
		held += int64(len(*a.queue[(a.head+i)%aheadChunks]))
	}
	return held, a.fed
}

// Stop waits as Wait does and ends the goroutine; the next full chunk
// starts another. It returns the encoder's first error.
func (a *aheadWriter) Stop() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.wait()
	if a.running {
		a.quit = true
		a.work.Signal()
		for a.running {
			a.done.Wait()
		}
	}
	return a.err
}

// Reset stops as Stop does, forgets the error and writes to w from now
// on.
func (a *aheadWriter) Reset(w io.Writer) {
	a.Stop()
	a.mu.Lock()
	a.w, a.err, a.fed = w, nil, 0
	a.mu.Unlock()
}
