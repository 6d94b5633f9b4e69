package layout

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"sync/atomic"
	"time"
)

// PartTail follows a data file being written (a .part) as it grows and
// keeps what CompleteLength would return up to date without reading the
// file again: the length of its decompressed stream up to the end of
// its last complete batch. One goroutine reads the file as repair does
// (decompressing it: gzip member by member, zstd block by block) and,
// at the file's end, polls it every poll interval for more. It ends
// when the file has been published (renamed without PartSuffix) or
// removed and is read to its end, when its stream stops being whole
// pcapng blocks, when it cannot be read, or when Close is called or its
// context ends. Its methods are safe for concurrent use.
type PartTail struct {
	raw     atomic.Int64
	waiting atomic.Bool
	done    chan struct{}
	cancel  context.CancelFunc
	err     error // set before done is closed
}

// TailPart starts following the .part at path, open as f. It reads f
// with ReadAt only, so the caller may read f meanwhile; it never closes
// f: Close the PartTail before f.
func TailPart(ctx context.Context, f *os.File, path string, poll time.Duration) *PartTail {
	ctx, cancel := context.WithCancel(ctx)
	t := &PartTail{done: make(chan struct{}), cancel: cancel}
	gr := &growingReader{ctx: ctx, f: f, path: path, poll: poll, waiting: &t.waiting}
	go func() {
		defer close(t.done)
		_, err := ScanCuts(ctx, gr, CodecOf(path), func(raw int64) { t.raw.Store(raw) })
		if ctx.Err() == nil {
			t.err = err
		}
	}()
	return t
}

// Complete returns the length of the file's decompressed stream that is
// whole batches, as far as it has been read. caughtUp: the whole file
// as it is now has been read (raw is current, not behind). final: raw
// will not grow any more (the file was published or removed and read to
// its end, its stream stopped being readable, or the tail was closed);
// err is a read error that ended it.
func (t *PartTail) Complete() (raw int64, caughtUp, final bool, err error) {
	select {
	case <-t.done:
		return t.raw.Load(), true, true, t.err
	default:
	}
	caughtUp = t.waiting.Load()
	return t.raw.Load(), caughtUp, false, nil
}

// Close stops following and waits for the goroutine to end.
func (t *PartTail) Close() {
	t.cancel()
	<-t.done
}

// growingReader reads a file being written from its start, waiting at
// its end for more until it is published or removed (then its end is
// the end) or ctx ends.
type growingReader struct {
	ctx     context.Context
	f       *os.File
	path    string
	poll    time.Duration
	off     int64
	waiting *atomic.Bool
}

func (g *growingReader) Read(p []byte) (int, error) {
	gone := false
	for {
		n, err := g.f.ReadAt(p, g.off)
		g.off += int64(n)
		if n > 0 {
			return n, nil
		}
		if err != nil && err != io.EOF {
			return 0, err
		}
		if gone {
			return 0, io.EOF
		}
		if _, err := os.Lstat(g.path); errors.Is(err, fs.ErrNotExist) {
			// Published (or removed): it is written no more, and what
			// was written before is there to read once more.
			gone = true
			continue
		}
		g.waiting.Store(true)
		tm := time.NewTimer(g.poll)
		select {
		case <-g.ctx.Done():
			tm.Stop()
			return 0, g.ctx.Err()
		case <-tm.C:
		}
		g.waiting.Store(false)
	}
}
