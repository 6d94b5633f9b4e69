package wire

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

func TestClassOf(t *testing.T) {
	prevIdx, prevSize := -1, 0
	for n := 1; n <= 1<<33; n += 1 + n/7 {
		idx, size := classOf(n)
		switch {
		case size < n:
			t.Fatalf("classOf(%d) = %d bytes", n, size)
		case n > minClass && 4*size > 5*n+4*classSteps:
			t.Fatalf("classOf(%d) = %d bytes: more than a quarter wasted", n, size)
		case idx < prevIdx || idx == prevIdx && size != prevSize || idx > prevIdx && size <= prevSize:
			t.Fatalf("classOf(%d) = %d, %d after %d, %d: classes not one size each, in order", n, idx, size, prevIdx, prevSize)
		case idx >= numClasses:
			t.Fatalf("classOf(%d) = index %d, only %d classes", n, idx, numClasses)
		}
		prevIdx, prevSize = idx, size
	}
	for _, tt := range []struct{ n, size int }{{0, 512}, {512, 512}, {513, 640}, {1024, 1024}, {1025, 1280}, {1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 1<<18}, {16<<20 - 1024, 16 << 20}} {
		if _, size := classOf(tt.n); size != tt.size {
			t.Errorf("classOf(%d) = %d bytes, want %d", tt.n, size, tt.size)
		}
	}
}

// reserve is what a shared reader reserves for a payload of n bytes
// under a budget of limit.
func reserve(n int, limit int64) int64 {
	if n == 0 {
		return 0
	}
	_, size := classOf(n + HeaderSize)
	return min(int64(size), limit)
}

// TestSharedFrameReaderAccounting: a shared reader reserves exactly its
// buffer's class for each frame, gives it back when the frame is
// released or the next is read, and holds nothing after an error or
// Close; a header over a limit is refused before anything is reserved.
func TestSharedFrameReaderAccounting(t *testing.T) {
	frame := func(typ Type, n int) []byte {
		b := AppendHeader(nil, typ, 0, uint32(n))
		for i := range n {
			b = append(b, byte(i*7))
		}
		return b
	}
	cat := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	bad := frame(TypePing, 0)
	bad[0] = 'G'
	tests := []struct {
		name    string
		limit   int64
		in      []byte
		lengths []int // of the frames read
		want    error // of the Next after them
		waits   uint64
	}{
		{"empty stream", 1 << 20, nil, nil, io.EOF, 0},
		{"one ping", 1 << 20, frame(TypePing, 0), []int{0}, io.EOF, 0},
		{"sizes", 1 << 20, cat(frame(TypeBatch, 1), frame(TypeBatch, 504), frame(TypeBatch, 505), frame(TypeStats, 4000), frame(TypeBatch, 65536), frame(TypeBatch, 1<<20-8)),
			[]int{1, 504, 505, 4000, 65536, 1<<20 - 8}, io.EOF, 0},
		{"frame at the budget", 1 << 20, frame(TypeBatch, 1<<20), []int{1 << 20}, io.EOF, 0},
		{"frame over the budget", 1<<20 - 1, frame(TypeBatch, 1<<20), nil, ErrTooLarge, 0},
		{"over max frame", 64 << 20, frame(TypeBatch, 16<<20+1)[:HeaderSize], nil, ErrTooLarge, 0},
		{"over max control", 64 << 20, frame(TypeHello, 64<<10+1)[:HeaderSize], nil, ErrTooLarge, 0},
		{"bad magic after a frame", 1 << 20, cat(frame(TypeBatch, 100), bad), []int{100}, ErrBadMagic, 0},
		{"truncated payload", 1 << 20, frame(TypeBatch, 3000)[:2000], nil, io.ErrUnexpectedEOF, 0},
		{"truncated header", 1 << 20, cat(frame(TypeBatch, 10), frame(TypeBatch, 10)[:5]), []int{10}, io.ErrUnexpectedEOF, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := NewMemory(tt.limit, 0)
			fr := NewSharedFrameReader(bytes.NewReader(tt.in), Limits{}, mem)
			off := 0
			for i, n := range tt.lengths {
				h, p, err := fr.Next()
				if err != nil || int(h.Length) != n || !bytes.Equal(p, tt.in[off+HeaderSize:off+HeaderSize+n]) {
					t.Fatalf("frame %d: %d bytes, %v; want %d bytes as sent", i, len(p), err, n)
				}
				off += HeaderSize + n
				if got, want := mem.Stats().Reserved, reserve(n, tt.limit); got != want {
					t.Fatalf("frame %d of %d bytes: %d bytes reserved, want %d", i, n, got, want)
				}
				if i%2 == 0 {
					fr.Release()
					if got := mem.Stats().Reserved; got != 0 {
						t.Fatalf("frame %d released: %d bytes still reserved", i, got)
					}
				}
				// The reader reads ahead one header at most: whether
				// another frame follows, never more of it.
				if want := min(len(tt.in)-off, HeaderSize); n > 0 && fr.Buffered() != want && int64(n) < tt.limit {
					t.Fatalf("frame %d: %d bytes buffered, want %d", i, fr.Buffered(), want)
				}
			}
			_, _, err := fr.Next()
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if st := mem.Stats(); st.Reserved != 0 || st.Waits != tt.waits || st.Waiting != 0 {
				t.Fatalf("after the error: %+v", st)
			}
			fr.Close()
			if _, _, err := fr.Next(); !errors.Is(err, ErrClosed) {
				t.Fatalf("after Close: %v, want ErrClosed", err)
			}
			if st := mem.Stats(); st.Reserved != 0 {
				t.Fatalf("after Close: %+v", st)
			}
		})
	}
}

// TestSharedFrameReaderRejectsBeforeReserving: with the whole budget
// taken, a header over a limit still fails at once (nothing reserved,
// no wait), and a good header waits.
func TestSharedFrameReaderRejectsBeforeReserving(t *testing.T) {
	mem := NewMemory(64<<10, 0)
	holder := NewSharedFrameReader(bytes.NewReader(AppendHeader(make([]byte, 0, 64<<10), TypeBatch, 0, 60<<10)[:HeaderSize+60<<10]), Limits{}, mem)
	hctx, hcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer hcancel()
	if _, _, err := holder.NextContext(hctx); err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	full := mem.Stats().Reserved
	for _, hdr := range [][]byte{
		AppendHeader(nil, TypeBatch, 0, 16<<20+1),
		AppendHeader(nil, TypeBatch, 0x70, 10),
		AppendHeader(nil, TypeStats, 0, 1<<20),
		{Magic, Version + 1, byte(TypeBatch), 0, 10, 0, 0, 0},
	} {
		fr := NewSharedFrameReader(bytes.NewReader(hdr), Limits{}, mem)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, _, err := fr.NextContext(ctx)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("header %x accepted", hdr)
		}
		if st := mem.Stats(); st.Reserved != full || st.Waits != 0 {
			t.Fatalf("header %x: %+v", hdr, st)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	fr := NewSharedFrameReader(bytes.NewReader(AppendHeader(nil, TypeBatch, 0, 10<<10)), Limits{}, mem)
	if _, _, err := fr.NextContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a good header with the budget spent: %v, want a wait ended by the context", err)
	}
	if st := mem.Stats(); st.Reserved != full || st.Waits != 1 || st.Waiting != 0 {
		t.Fatalf("after the wait: %+v", st)
	}
}

// TestMemoryWaitAndGrant: a reader over the budget waits without
// reading, and continues once another gives its buffer back.
func TestMemoryWaitAndGrant(t *testing.T) {
	const n = 100 << 10
	mem := NewMemory(reserve(n, 1<<30)+reserve(n, 1<<30)/2, 0)
	payload := bytes.Repeat([]byte("x"), n)
	a := NewSharedFrameReader(bytes.NewReader(append(AppendHeader(nil, TypeBatch, 0, n), payload...)), Limits{}, mem)
	if _, _, err := a.Next(); err != nil {
		t.Fatal(err)
	}
	// b's stream is a pipe: the test sees whether b reads it.
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	b := NewSharedFrameReader(c2, Limits{}, mem)
	done := make(chan error, 1)
	go func() {
		_, p, err := b.Next()
		if err == nil && !bytes.Equal(p, payload) {
			err = errors.New("payload differs")
		}
		b.Close()
		done <- err
	}()
	if _, err := c1.Write(AppendHeader(nil, TypeBatch, 0, n)); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, 10*time.Second, "a reader waits for memory", func() bool { return mem.Stats().Waiting == 1 })
	c1.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c1.Write(payload[:1]); err == nil {
		t.Fatal("a reader waiting for memory read its stream")
	}
	c1.SetWriteDeadline(time.Now().Add(10 * time.Second))
	a.Release()
	if _, err := c1.Write(payload); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the waiting reader did not continue: %+v", mem.Stats())
	}
	if st := mem.Stats(); st.Reserved != 0 || st.Waits != 1 || st.Waiting != 0 || st.WaitTime <= 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

// TestMemoryPatience: a smaller request passes a waiting larger one
// (first fit), until the larger one has waited for the patience; then
// younger requests get only what leaves room for it, and it is served
// first.
func TestMemoryPatience(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := NewMemory(10, time.Second)
		var big, small, late waiter
		ctx := context.Background()
		take := func(w *waiter, n int64) chan error {
			ch := make(chan error, 1)
			go func() { ch <- mem.acquire(ctx, w, n) }()
			synctest.Wait()
			return ch
		}
		var first waiter
		if err := mem.acquire(ctx, &first, 6); err != nil {
			t.Fatal(err)
		}
		bigDone := take(&big, 8)
		if err := mem.acquire(ctx, &small, 3); err != nil { // 6+3 fits: passes big
			t.Fatal(err)
		}
		if st := mem.Stats(); st.Reserved != 9 || st.Waiting != 1 {
			t.Fatalf("%+v", st)
		}
		time.Sleep(time.Second)    // the bubble's clock: big has now waited the whole patience
		lateDone := take(&late, 1) // 9+1 fits, but not with big's 8: waits
		if st := mem.Stats(); st.Reserved != 9 || st.Waiting != 2 {
			t.Fatalf("after the patience: %+v", st)
		}
		mem.release(6) // 3 used: big (8) does not fit yet, late must not pass it
		synctest.Wait()
		if st := mem.Stats(); st.Reserved != 3 || st.Waiting != 2 {
			t.Fatalf("after a release: %+v", st)
		}
		mem.release(3) // big, then late
		if err := <-bigDone; err != nil {
			t.Fatal(err)
		}
		if err := <-lateDone; err != nil {
			t.Fatal(err)
		}
		if st := mem.Stats(); st.Reserved != 9 || st.Waiting != 0 || st.Waits != 2 || st.WaitTime != time.Second {
			t.Fatalf("at the end: %+v", st)
		}
	})
}

// TestMemoryCancel: a wait ended by its context holds nothing and lets
// the next waiter through.
func TestMemoryCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := NewMemory(10, 0)
		var a, b, c waiter
		bg := context.Background()
		if err := mem.acquire(bg, &a, 5); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancelCause(bg)
		bDone, cDone := make(chan error, 1), make(chan error, 1)
		go func() { bDone <- mem.acquire(ctx, &b, 10) }()
		synctest.Wait()
		go func() { cDone <- mem.acquire(bg, &c, 5) }() // fits: first fit
		if err := <-cDone; err != nil {
			t.Fatal(err)
		}
		cause := errors.New("kicked")
		cancel(cause)
		if err := <-bDone; err != cause {
			t.Fatalf("cancelled wait: %v, want %v", err, cause)
		}
		if st := mem.Stats(); st.Reserved != 10 || st.Waiting != 0 {
			t.Fatalf("%+v", st)
		}
	})
}

// TestSharedFrameReadersNoDeadlock: many readers with random frame sizes
// share a budget of one largest frame and a little; every frame arrives
// intact and the budget ends at zero.
func TestSharedFrameReadersNoDeadlock(t *testing.T) {
	const readers, frames, maxFrame = 32, 40, 256 << 10
	mem := NewMemory(maxFrame+maxFrame/2, 50*time.Millisecond)
	lim := Limits{MaxFrame: maxFrame}
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		rng := rand.New(rand.NewPCG(uint64(r), 9))
		var stream []byte
		var sums []byte
		for range frames {
			n := rng.IntN(maxFrame + 1)
			if rng.IntN(4) > 0 {
				n = rng.IntN(2000)
			}
			v := byte(rng.Uint32())
			stream = append(AppendHeader(stream, TypeBatch, 0, uint32(n)), bytes.Repeat([]byte{v}, n)...)
			sums = append(sums, v)
		}
		c1, c2 := net.Pipe()
		t.Cleanup(func() { c1.Close(); c2.Close() })
		go c1.Write(stream)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fr := NewSharedFrameReader(c2, lim, mem)
			defer fr.Close()
			for i := range frames {
				_, p, err := fr.Next()
				if err == nil && len(p) > 0 && (p[0] != sums[i] || p[len(p)-1] != sums[i]) {
					err = errors.New("payload differs")
				}
				if err != nil {
					errs <- err
					return
				}
				if st := mem.Stats(); st.Reserved > st.Limit {
					errs <- errors.New("over the budget")
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("readers stuck: %+v", mem.Stats())
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := mem.Stats(); st.Reserved != 0 || st.Waiting != 0 {
		t.Fatalf("at the end: %+v", st)
	}
}

// TestSharedFrameReaderAllocs: reading frames through a shared reader,
// pooled buffer and reservation included, allocates nothing.
func TestSharedFrameReaderAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	var stream []byte
	for _, n := range []int{100, 70 << 10, 1 << 20, 3000} {
		stream = append(AppendHeader(stream, TypeBatch, 0, uint32(n)), make([]byte, n)...)
	}
	mem := NewMemory(4<<20, time.Second)
	fr := NewSharedFrameReader(&loopReader{b: stream}, Limits{}, mem)
	for range 8 { // fill the pools
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame, want 0", allocs)
	}
}

// TestBuffer: Buffer returns a buffer of the length asked for, whose
// capacity is its size class; a buffer given back is handed out again
// without an allocation; a slice of another capacity is not pooled.
func TestBuffer(t *testing.T) {
	for _, n := range []int{1, 512, 513, 1 << 20, 1<<20 + HeaderSize} {
		bp := Buffer(n)
		if _, size := classOf(n); len(*bp) != n || cap(*bp) != size {
			t.Errorf("Buffer(%d): len %d cap %d, want %d and %d", n, len(*bp), cap(*bp), n, size)
		}
		PutBuffer(bp)
	}
	const n = 1<<20 + 100
	PutBuffer(Buffer(n))
	if allocs := testing.AllocsPerRun(50, func() { PutBuffer(Buffer(n)) }); allocs != 0 {
		t.Errorf("Buffer after PutBuffer: %v allocations, want 0", allocs)
	}
	odd := make([]byte, 1000) // not a class size
	PutBuffer(&odd)
	if bp := Buffer(1000); &(*bp)[0] == &odd[0] {
		t.Errorf("a slice of a capacity that is no class size was pooled")
	}

	// Kept across garbage collections, up to bufferKeep bytes.
	keep := bufferKeep
	t.Cleanup(func() { bufferKeep = keep })
	bufferKeep = 3 << 20
	frames.mu.Lock()
	frames.free, frames.bytes = [numClasses][]*[]byte{}, 0 // what the cases above left
	frames.mu.Unlock()
	bps := []*[]byte{Buffer(1 << 20), Buffer(1 << 20), Buffer(1 << 20), Buffer(1 << 20)}
	for _, bp := range bps {
		PutBuffer(bp)
	}
	runtime.GC()
	runtime.GC()
	seen := map[*byte]bool{}
	for _, bp := range bps[:3] {
		seen[&(*bp)[:1][0]] = true
	}
	for i := range 4 {
		bp := Buffer(1 << 20)
		if got := seen[&(*bp)[:1][0]]; got != (i < 3) {
			t.Errorf("buffer %d after two collections: reused %v, want %v (3 MiB kept)", i, got, i < 3)
		}
	}
}
