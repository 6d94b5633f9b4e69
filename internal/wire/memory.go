package wire

import (
	"context"
	"math/bits"
	"sync"
	"time"
)

// Memory is a budget of bytes for the payload buffers of FrameReaders
// made with NewSharedFrameReader, and the pool those buffers come from
// and go back to. Safe for concurrent use.
//
// A reader reserves a whole buffer for a frame once its header arrived,
// all at once, and gives it back when the frame was handled; a reader
// waiting for a reservation holds none (it gave back its previous
// buffer before asking), so waiting readers cannot block each other
// into a deadlock: what is reserved belongs to readers that are reading
// or handling a frame, and comes back when they finish or fail.
//
// Reservations are granted first fit, oldest waiter first: a smaller
// request may pass a larger one that does not fit yet. Once the oldest
// waiter has waited for the patience given to NewMemory, younger
// requests are granted only what leaves room for it, so that a stream
// of small frames cannot starve a large one.
//
// Buffers come in size classes (four per power of two, from 512 bytes)
// and a reservation counts a buffer's whole capacity. Buffers given back
// stay in a sync.Pool for reuse until garbage collections free them; the
// budget counts the buffers in use.
type Memory struct {
	limit    int64
	patience time.Duration

	mu         sync.Mutex
	used       int64
	head, tail *waiter // waiting readers, oldest first
	nwait      int
	waits      uint64
	waited     time.Duration

	pools pools
	top   sync.Pool // *[]byte of exactly limit bytes, when no class fits under the limit
}

// MemoryStats is a snapshot of a Memory.
type MemoryStats struct {
	Limit    int64         // the budget, bytes
	Reserved int64         // bytes reserved now
	Waiting  int           // readers waiting for a reservation now
	Waits    uint64        // reservations that had to wait, since start
	WaitTime time.Duration // time spent waiting, all readers, since start
}

// NewMemory returns a budget of limit bytes (at least the largest frame
// its readers accept, or such a frame is refused with ErrTooLarge). A
// reader that has waited for patience (0: no limit) stops younger ones
// from taking the memory it needs.
func NewMemory(limit int64, patience time.Duration) *Memory {
	return &Memory{limit: limit, patience: patience}
}

// Stats returns the budget's state now.
func (m *Memory) Stats() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoryStats{Limit: m.limit, Reserved: m.used, Waiting: m.nwait, Waits: m.waits, WaitTime: m.waited}
}

// waiter is a reader waiting for n bytes; FrameReader embeds one, so
// waiting allocates nothing but the channel, once per reader.
type waiter struct {
	n          int64
	since      time.Time
	ready      chan struct{} // cap 1: a grant
	granted    bool          // guarded by Memory.mu
	prev, next *waiter
}

// maxScan bounds how many waiters a grant looks at, so that a release
// costs little however many readers wait.
const maxScan = 256

// acquire reserves n bytes (n <= m.limit), waiting while they do not
// fit, until ctx is done (then it returns ctx's cause and holds nothing).
func (m *Memory) acquire(ctx context.Context, w *waiter, n int64) error {
	m.mu.Lock()
	if m.head == nil && m.used+n <= m.limit || m.head != nil && m.fits(n, time.Now()) {
		m.used += n
		m.mu.Unlock()
		return nil
	}
	if w.ready == nil {
		w.ready = make(chan struct{}, 1)
	}
	w.n, w.since, w.granted = n, time.Now(), false
	m.push(w)
	m.waits++
	m.mu.Unlock()

	var err error
	select {
	case <-w.ready:
	case <-ctx.Done():
		m.mu.Lock()
		if w.granted {
			<-w.ready // sent under m.mu, before granted was seen
			m.used -= n
		} else {
			m.remove(w)
		}
		m.grant(time.Now())
		m.mu.Unlock()
		err = context.Cause(ctx)
	}
	m.mu.Lock()
	m.waited += time.Since(w.since)
	m.mu.Unlock()
	return err
}

// fits reports whether a request of n bytes, younger than every waiter,
// may be granted now; m.mu held, m.head not nil.
func (m *Memory) fits(n int64, now time.Time) bool {
	if m.used+n > m.limit {
		return false
	}
	return !m.aged(now) || m.used+n+m.head.n <= m.limit
}

// aged reports whether the oldest waiter has waited for the patience.
func (m *Memory) aged(now time.Time) bool {
	return m.patience > 0 && m.head != nil && now.Sub(m.head.since) >= m.patience
}

// release gives back n bytes and grants waiters what now fits.
func (m *Memory) release(n int64) {
	m.mu.Lock()
	m.used -= n
	if m.head != nil {
		m.grant(time.Now())
	}
	m.mu.Unlock()
}

// grant hands out reservations to waiters, oldest first, each that fits
// (see fits); m.mu held.
func (m *Memory) grant(now time.Time) {
	w := m.head
	for i := 0; w != nil && i < maxScan && m.used < m.limit; i++ {
		next := w.next
		if w == m.head && m.used+w.n <= m.limit || w != m.head && m.fits(w.n, now) {
			m.used += w.n
			m.remove(w)
			w.granted = true
			w.ready <- struct{}{}
		}
		w = next
	}
}

func (m *Memory) push(w *waiter) {
	w.prev, w.next = m.tail, nil
	if m.tail != nil {
		m.tail.next = w
	} else {
		m.head = w
	}
	m.tail = w
	m.nwait++
}

func (m *Memory) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		m.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		m.tail = w.prev
	}
	w.prev, w.next = nil, nil
	m.nwait--
}

// Size classes: minClass bytes, then classSteps sizes per power of two
// (512, 640, 768, 896, 1024, 1280, ...), so a buffer wastes less than a
// quarter of its size. Lengths are at most 1<<32 + HeaderSize.
const (
	minClassShift = 9
	minClass      = 1 << minClassShift
	classSteps    = 4
	numClasses    = (33-minClassShift)*classSteps + 1
	topClass      = -1 // a buffer of exactly Memory.limit bytes
)

// classOf returns the smallest class holding n bytes: its index and size.
func classOf(n int) (int, int) {
	if n <= minClass {
		return 0, minClass
	}
	e := bits.Len(uint(n - 1)) // 1<<(e-1) < n <= 1<<e
	base := 1 << (e - 1)
	step := base / classSteps
	j := (n - base + step - 1) / step // 1..classSteps
	return (e-1-minClassShift)*classSteps + j, base + j*step
}

// pools holds free buffers by size class, as *[]byte so that putting
// one back allocates nothing.
type pools [numClasses]sync.Pool

// unbudgeted serves the FrameReaders made with NewFrameReader.
var unbudgeted pools

func (p *pools) get(class, size int) *[]byte {
	if bp, _ := p[class].Get().(*[]byte); bp != nil {
		return bp
	}
	b := make([]byte, size)
	return &b
}

func (p *pools) put(class int, bp *[]byte) { p[class].Put(bp) }

// Buffer returns a buffer of length n (n > 0) from a pool of size
// classes, for a frame that outlives the call that built it (an ingest
// collector's record, waiting for Kafka's answer). Give it back with
// PutBuffer once nothing refers to it any more; a buffer never given
// back is left to the garbage collector.
//
// Unlike the readers' sync.Pools, which garbage collections empty, the
// pool keeps up to bufferKeep bytes of free buffers for good: a
// process that holds frames for a while keeps reusing the same pages
// instead of touching fresh ones (a page fault per 4 KiB).
func Buffer(n int) *[]byte {
	class, size := classOf(n)
	frames.mu.Lock()
	if free := frames.free[class]; len(free) > 0 {
		bp := free[len(free)-1]
		frames.free[class] = free[:len(free)-1]
		frames.bytes -= int64(cap(*bp))
		frames.mu.Unlock()
		*bp = (*bp)[:n]
		return bp
	}
	frames.mu.Unlock()
	b := make([]byte, n, size)
	return &b
}

// PutBuffer gives back a buffer Buffer returned; its bytes must no
// longer be used. A slice of any other capacity, or one that would take
// the free buffers over bufferKeep bytes, is dropped.
func PutBuffer(bp *[]byte) {
	c := cap(*bp)
	class, size := classOf(c)
	if size != c {
		return
	}
	frames.mu.Lock()
	if frames.bytes+int64(c) <= bufferKeep {
		frames.free[class] = append(frames.free[class], bp)
		frames.bytes += int64(c)
	}
	frames.mu.Unlock()
}

// bufferKeep bounds the bytes of free buffers the pool of Buffer keeps.
var bufferKeep int64 = 64 << 20

// frames serves Buffer: free buffers by size class.
var frames struct {
	mu    sync.Mutex
	free  [numClasses][]*[]byte
	bytes int64
}
