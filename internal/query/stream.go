package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"path/filepath"
	"reflect"
	"strings"
	"time"
	"unsafe"

	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// testOpened, nil outside tests, runs after a file is opened.
var testOpened func(path string)

// testTaken, nil outside tests, runs after a packet is taken.
var testTaken func(s *stream)

// entrySize is the size of a pkt, an entry of a stream's window;
// sliceSize of a []byte, an entry of a free list.
var (
	entrySize = int64(reflect.TypeFor[pkt]().Size())
	sliceSize = int64(reflect.TypeFor[[]byte]().Size())
)

// pkt is a selected packet held for ordering; data is the stream's:
// in ck, the reader's buffer it was read into, or (ck nil) a buffer of
// the window's own that it was copied into.
type pkt struct {
	ts    int64
	seq   uint64 // read order within the stream: ties keep it
	out   int    // index into query.outs
	orig  uint32
	round uint64 // follow mode: the merge round that read it
	data  []byte
	ck    *rchunk
}

// rchunk is a buffer a stream's pcap reader read into (ReaderConfig.Refill),
// refs the packets held that point into it. The window keeps a packet
// where it was read instead of copying it (take): the reader writes
// only past what it has returned, and once it moves on to a new chunk
// the old one stays as it is until its last packet is written; then it
// is the stream's to hand out again (unpin).
type rchunk struct {
	b    []byte
	refs int
}

// classSize is what the window counts for a packet of n bytes, held
// in a chunk or copied: its size class (buf), a power of two, at least
// 64. So when the window is full does not depend on where a packet is
// kept.
func classSize(n int) int64 { return 1 << sizeClass(n) }

func sizeClass(n int) int { return max(bits.Len(uint(max(n, 1)-1)), 6) }

func pktLess(a, b pkt) bool { return a.ts < b.ts || a.ts == b.ts && a.seq < b.seq }

// stream is one agent's files, read one after the other in the order
// they were written, its selected packets put in timestamp order in a
// reorder window of limit bytes: a packet is released when the window
// is full, when the files are read, or as soon as the indexes show no
// packet still to be read is older (floor), so disorder within the
// window is sorted exactly; a packet older than one already released
// is ErrOutOfOrder. It holds one open file at a time.
type stream struct {
	q     *query
	agent string
	rank  int // ties between agents: by name

	files []layout.FileInfo
	next  int // files[next] is opened next
	// filesFirst[i] is the earliest packet time of files[i:] as
	// retention's index lists them (math.MinInt64: one is not listed
	// with its times; math.MaxInt64: no file): see floor.
	filesFirst []int64
	cur        *fileSource
	path       string    // of cur
	ifmap      []ifEntry // cur's interfaces, by index
	// res is what the stream's reading counts: the query's, or with
	// producers its own, added to the query's once they are done.
	res    *Result
	filter *filter.Filter // the query's filter, or with producers its own clone
	// pending: cur's statistics blocks, kept once cur is read to its
	// end if it holds no packet at or after until (curPast).
	pending []stats
	curPast bool

	// The window: mem counts the buffers of the packets held and the
	// window's entries (the capacity of its ring and heap), freeMem the
	// buffers released and kept for reuse; together they stay within
	// limit (but for one packet) and slack. listMem counts the free
	// lists' entries: at most one for each buffer the stream has kept
	// at once (buf).
	h       window
	mem     int64
	freeMem int64
	listMem int64
	limit   int64
	seq     uint64
	pops    uint64    // packets released
	slack   int64     // what the free lists may hold beyond limit (produce.go)
	flight  int64     // of the buffers released and not given back yet
	prod    *producer // nil: the merge fills the stream itself
	last    int64     // timestamp of the last packet released
	out     bool      // a packet was released
	done    bool      // no more files
	reads   int

	// Follow mode: high is the latest timestamp read (of any packet,
	// selected or not: the agent's clock has come that far), lastRead
	// when a packet was last read, state what the last fill stopped at;
	// lastKey is the name (without PartSuffix) of the last file taken
	// from files, the next listing keeps only those after it.
	high     int64
	seen     bool
	lastRead time.Time
	state    fillState
	lastKey  string
	newerAt  time.Time // when a file newer than the followed one was first listed

	// cov is the agent's coverage so far (coverage.go); curKnown: the
	// times of cur are known without reading its packets.
	cov      covAcc
	curKnown bool

	p    pcapfile.Packet
	free [33][][]byte // data buffers by size class
	kit  kit          // what its files are read with, one after the other

	// The reader's chunks: ck the one it reads into now, spare those
	// free, pinned the bytes of the others, which packets hold. A packet
	// is copied instead of held in its chunk once pinned reaches half
	// the limit, so disorder cannot make one packet hold a chunk each
	// beyond that.
	ck     *rchunk
	spare  []*rchunk
	pinned int64
}

func newStream(q *query, agent string, rank int, files []layout.FileInfo, limit int64) *stream {
	s := &stream{q: q, agent: agent, rank: rank, files: files, limit: limit,
		h: newWindow(), cov: covAcc{listed: len(files)}, res: &q.res, filter: q.filter, slack: freeSlack(limit)}
	s.filesFirst = make([]int64, len(files)+1)
	s.filesFirst[len(files)] = math.MaxInt64
	for i := len(files) - 1; i >= 0; i-- {
		f := int64(math.MinInt64)
		if files[i].Times {
			f = files[i].First
		}
		s.filesFirst[i] = min(f, s.filesFirst[i+1])
	}
	if q.sem != nil {
		s.kit.ahead = newAheadKit(q.sem)
	}
	s.kit.refill = s.refill
	return s
}

// refill is the stream's readers' ReaderConfig.Refill: a chunk of at
// least n bytes, a spare one if one is large enough. Chunks are made
// only when none is spare, so the spare ones are never more than were
// in use at once (a chunk larger than 256 KiB, made for a block that
// did not fit, is kept too, for the next such block).
func (s *stream) refill(n int) []byte {
	if c := s.ck; c != nil {
		s.ck = nil
		if c.refs == 0 {
			s.spare = append(s.spare, c)
		} else {
			s.pinned += int64(len(c.b))
		}
	}
	var c *rchunk
	for i := len(s.spare) - 1; i >= 0; i-- { // the last freed first
		if len(s.spare[i].b) >= n {
			c = s.spare[i]
			last := len(s.spare) - 1
			s.spare[i], s.spare[last] = s.spare[last], nil
			s.spare = s.spare[:last]
			break
		}
	}
	if c == nil {
		c = &rchunk{b: make([]byte, max(n, pcapfile.ReaderBufferSize))}
	}
	s.ck = c
	return c.b
}

// unpin lets go of a packet held in c.
func (s *stream) unpin(c *rchunk) {
	if c.refs--; c.refs == 0 && c != s.ck {
		s.pinned -= int64(len(c.b))
		s.spare = append(s.spare, c)
	}
}

// within reports whether d lies in c's buffer.
func within(d []byte, c *rchunk) bool {
	if len(d) == 0 {
		return false
	}
	p, b := uintptr(unsafe.Pointer(unsafe.SliceData(d))), uintptr(unsafe.Pointer(unsafe.SliceData(c.b)))
	return p >= b && p+uintptr(len(d)) <= b+uintptr(len(c.b))
}

// empty reports whether the stream has nothing more to give.
func (s *stream) empty() bool { return s.h.len() == 0 }

// head is the next packet the stream releases (after fill).
func (s *stream) head() *pkt { return s.h.head() }

// fillState is why a fill stopped, in follow mode.
type fillState uint8

const (
	fillFull   fillState = iota // the window is full (or the stream done)
	fillCaught                  // all there is now was read
	fillBehind                  // a followed file's tail is still reading what is there
)

// fill reads until the window is full, the files are read, or the
// window's head is no later than any packet still to be read (floor);
// in follow mode, until the window is full or there is nothing more to
// read now (s.state says which).
func (s *stream) fill(ctx context.Context) error {
	s.state = fillFull
	for !s.done && s.mem < s.limit {
		if s.h.len() > 0 && s.h.head().ts <= s.floor() {
			return nil
		}
		if s.cur == nil {
			if s.q.cfg.Follow && s.next == len(s.files) {
				s.state = fillCaught
				return nil
			}
			if err := s.open(ctx); err != nil {
				return err
			}
			continue
		}
		err := s.cur.next(&s.p)
		if err == io.EOF && s.cur.tail != nil {
			grew, final, terr := s.cur.advance()
			if terr != nil {
				return fmt.Errorf("following %s: %w", s.path, terr)
			}
			if grew {
				continue
			}
			if !final && !s.abandon() {
				s.state = fillBehind
				if s.cur.caught {
					s.state = fillCaught
				}
				return nil
			}
		}
		if err == io.EOF {
			if !s.curPast {
				s.keepStats()
			}
			s.closeCur()
			continue
		}
		if err != nil {
			s.cov.note(filepath.Base(s.path), errFile(s.path, err))
			return fmt.Errorf("reading %s: %w", s.path, err)
		}
		if !s.curKnown {
			s.cov.kept.Add(s.p.Timestamp)
		}
		if s.reads++; s.reads&1023 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		if s.q.cfg.Follow {
			s.high, s.seen = max(s.high, s.p.Timestamp), true
			s.lastRead = s.q.now
		}
		if err := s.take(ctx, &s.p); err != nil {
			return err
		}
		if testTaken != nil {
			testTaken(s)
		}
	}
	return nil
}

// floor is a time no packet still to be read of the stream is earlier
// than: the earliest of the index's blocks not yet read whole of the
// open file and of the files after it as retention's index lists them,
// and within a block the index says is in time order the packet of it
// read last (fileSource.floor; math.MinInt64 when that is not known: a
// file read without its index, a file not listed with its times,
// following). A head no later than it
// comes before every packet the stream has left (a later one with the
// same time is read after it: ties keep the read order), so fill
// releases it without waiting for the window to fill: the same packets
// in the same order, from a window that holds a packet or two of
// ordered blocks and about one block of others instead of its whole
// share of --reorder-mem (a 1 GiB export of 8 agents peaks at 37 MiB;
// 71 before any early release). An index that lies about its times or
// its order at worst makes a later packet ErrOutOfOrder, as disorder
// beyond the window does.
func (s *stream) floor() int64 {
	if s.q.cfg.Follow {
		return math.MinInt64
	}
	f := s.filesFirst[s.next]
	if s.cur != nil {
		f = min(f, s.cur.floor())
	}
	return f
}

// open opens the next file worth reading, or marks the stream done.
func (s *stream) open(ctx context.Context) error {
	for s.next < len(s.files) {
		fi := s.files[s.next]
		s.next++
		s.lastKey = strings.TrimSuffix(fi.Path, layout.PartSuffix)
		if fi.Times {
			s.cov.kept.Add(fi.First)
			s.cov.kept.Add(fi.Last)
		}
		if fi.Times && (fi.Last < s.q.since || fi.First >= s.q.until) || s.q.sel.skipFile(fi) {
			s.res.FilesSkipped++
			if !fi.Times {
				s.cov.later = append(s.cov.later, fi)
			}
			continue
		}
		var src *fileSource
		var err error
		if fi.Part && s.q.cfg.Follow {
			src, err = openFollowed(ctx, fi, &s.kit, s.onStats, s.q.sel, s.q.poll)
			s.newerAt = time.Time{}
		} else {
			src, err = openFile(ctx, fi, &s.kit, s.onStats, s.q.sel)
		}
		if err != nil {
			s.cov.note(filepath.Base(fi.Path), errFile(fi.Path, err))
			return fmt.Errorf("agent %s: %w", s.agent, err)
		}
		if src == nil {
			continue // a .part without a complete batch yet
		}
		s.curKnown = fi.Times || src.indexed && !fi.Part
		if !fi.Times && src.times.OK {
			s.cov.kept.Add(src.times.Min) // the index's blocks
			s.cov.kept.Add(src.times.Max)
		}
		s.res.FilesRead++
		s.res.BytesRead += src.indexBytes + src.scanBytes
		if src.indexed {
			s.res.FilesIndexed++
		} else {
			s.res.FilesScanned++
			if src.indexProblem != nil && s.q.cfg.Logger != nil {
				s.q.cfg.Logger.Warn("query: index not used, file scanned", "file", fi.Path, "err", src.indexProblem)
			}
		}
		s.cur, s.path = src, fi.Path
		s.pending, s.curPast = s.pending[:0], false
		if testOpened != nil {
			testOpened(fi.Path)
		}
		s.ifmap = s.ifmap[:0]
		return nil
	}
	s.done = !s.q.cfg.Follow
	return nil
}

// closeCur closes the open file, counting what was read of it.
func (s *stream) closeCur() {
	if s.cur != nil {

		s.cur.close()
		s.res.BytesRead += s.cur.bytesRead()
		if s.cur.indexed {
			s.res.BlocksRead += int64(s.cur.blocksRead)
			s.res.BlocksSkipped += int64(s.cur.blocksTotal - s.cur.blocksRead)
		}
		s.cur = nil
		s.pending = s.pending[:0]
	}
}

// take holds p if the query selects it.
func (s *stream) take(ctx context.Context, p *pcapfile.Packet) error {
	ts := p.Timestamp
	if ts >= s.q.until {
		// Past the range. A file read without its index is read on to
		// its end all the same: nothing says its later packets are not
		// older (a replayed file), and the index reads them.
		s.curPast = true
		return nil
	}
	if ts < s.q.since {
		return nil
	}
	e, err := s.outIface(p.Interface)
	if e.out < 0 || err != nil {
		return err
	}
	if !e.compiled {
		if err := s.q.compile(ctx, e.out); err != nil {
			return err
		}
		e.compiled = true
	}
	out := e.out
	if ok, _ := s.filter.Match(e.linkType, p.Data, p.OrigLen); !ok || !s.q.cid.match(e.linkType, p.Data) {
		return nil
	}
	if s.out && ts < s.last && !s.q.cfg.Follow {
		return fmt.Errorf("agent %s: %s: a packet at %d ns follows one at %d ns already written: %w (raise --reorder-mem: this agent's window is %d KiB, its share of %d agents)",
			s.agent, s.path, ts, s.last, ErrOutOfOrder, s.limit>>10, len(s.q.all))
	}
	// Held where it was read while the chunks held stay under half the
	// limit; else copied (and a packet of no bytes needs neither).
	var data []byte
	var ck *rchunk
	if c := s.ck; c != nil && s.pinned < s.limit/2 && within(p.Data, c) {
		data, ck = p.Data, c
		c.refs++
	} else {
		data = append(s.buf(len(p.Data)), p.Data...)
	}
	entries := s.h.entries()
	if e := s.h.slot(ts); e != nil {
		e.ts, e.seq, e.out, e.orig, e.round, e.data, e.ck = ts, s.seq, out, p.OrigLen, s.q.hold(), data, ck
	} else {
		s.h.push(pkt{ts: ts, seq: s.seq, out: out, orig: p.OrigLen, round: s.q.hold(), data: data, ck: ck})
	}
	s.seq++
	s.mem += classSize(len(p.Data)) + int64(s.h.entries()-entries)*entrySize
	return nil
}

// pop releases the head; give its data back with release once written.
func (s *stream) pop() pkt {
	var v pkt
	s.popInto(&v)
	return v
}

// popInto is pop into *dst.
func (s *stream) popInto(dst *pkt) {
	s.h.popInto(dst)
	s.last, s.out = dst.ts, true
	s.pops++
}

// release lets go of a popped packet's bytes, once written.
func (s *stream) release(p *pkt) {
	s.mem -= classSize(len(p.data))
	s.drop(p)
}

// drop lets go of p's bytes, no longer counted in mem: its chunk's
// hold, or its buffer back on its free list.
func (s *stream) drop(p *pkt) {
	if p.ck != nil {
		s.unpin(p.ck)
	} else {
		s.recycle(p.data)
	}
	p.data, p.ck = nil, nil
}

// recycle puts a buffer no longer counted in mem on its free list.
func (s *stream) recycle(b []byte) {
	c := bits.Len(uint(cap(b) - 1))
	entries := cap(s.free[c])
	s.free[c] = append(s.free[c], b[:0])
	s.freeMem += int64(cap(b))
	s.listMem += int64(cap(s.free[c])-entries) * sliceSize
}

// buf returns an empty buffer of capacity 1<<c, c the size class of
// n (a power of two, at least 64): one released of that class, else a
// new one, made once the buffers released of other classes that it
// would take beyond the limit (and the slack the free lists and the
// buffers in flight may take, produce.go) are dropped. So the window
// and the buffers kept for it stay within the limit however the
// packets' sizes change, and a steady mix makes no garbage. The free
// lists' own entries (listMem) are left out of that sum: dropping a
// buffer does not shrink a list, and a window that drains at once (the
// early release, floor) leaves lists as long as it held packets, which
// counted would keep the sum over the limit and drop a buffer for each
// one made from then on (TestAllocationsConstant with producers). They
// are bounded all the same: an entry for each buffer kept at once, so
// at most 24 bytes for each 64 of the limit and slack. A buffer's
// capacity, what the window counts, is its packet's class alone: when
// the window is full, so the packets it releases, depends on the
// packets read and not on which buffers happen to be free (the same
// with producers as without).
func (s *stream) buf(n int) []byte {
	c := sizeClass(n)
	if l := len(s.free[c]); l > 0 {
		b := s.free[c][l-1]
		s.free[c] = s.free[c][:l-1]
		s.freeMem -= int64(cap(b))
		return b
	}
	over := func() bool { return s.mem+s.freeMem+s.flight+1<<c > s.limit+s.slack }
	for i := 0; i < len(s.free) && over(); i++ {
		if i == c {
			continue
		}
		for l := len(s.free[i]); l > 0 && over(); l-- {
			s.freeMem -= int64(cap(s.free[i][l-1]))
			s.free[i][l-1] = nil
			s.free[i] = s.free[i][:l-1]
		}
	}
	return make([]byte, 0, 1<<c)
}

// ifEntry is an interface of the open file: out its index in
// query.outs, -1 unselected, -2 not looked at yet; linkType its link
// type; compiled: the filter was compiled for it (query.compile).
type ifEntry struct {
	out      int
	linkType uint16
	compiled bool
}

// outIface maps interface i of the open file to the query's output
// interface, out -1 if the query does not select it.
func (s *stream) outIface(i int) (*ifEntry, error) {
	for len(s.ifmap) <= i {
		s.ifmap = append(s.ifmap, ifEntry{out: -2})
	}
	e := &s.ifmap[i]
	if e.out != -2 {
		return e, nil
	}
	ifcs := s.cur.interfaces()
	if i >= len(ifcs) {
		return e, errors.New("packet on an undeclared interface")
	}
	e.out, e.linkType = s.q.output(s, ifcs[i]), ifcs[i].LinkType
	return e, nil
}

// onStats keeps the statistics block of a selected interface of the
// open file, for the end of the output.
func (s *stream) onStats(i int, st pcapfile.InterfaceStats) {
	e, _ := s.outIface(i)
	o := e.out
	if o < 0 {
		return
	}
	c := "from " + filepath.Base(s.path)
	if st.Comment != "" {
		c += ": " + st.Comment
	}
	st.Comment = c
	s.pending = append(s.pending, stats{out: o, st: st})
}

func (s *stream) close() {
	s.closeCur()
	s.kit.close()
	s.done = true
}

// keepStats keeps the statistics blocks of the file just read for the
// end of the output: at once without producers; with, for the merge to
// keep once it has written the packets the stream released before
// (producer.event), so that they come in the order the merge alone
// would have kept them.
func (s *stream) keepStats() {
	if s.prod != nil {
		s.prod.event(s.pops, s.pending)
		return
	}
	s.q.stats = append(s.q.stats, s.pending...)
}
