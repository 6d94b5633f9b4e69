package query

import (
	"context"
	"sync"
)

// With threads to spare (Config.Threads above 1, not following), each
// stream is filled by a goroutine of its own, a producer: it reads the
// stream's files, filters, puts the packets selected in the stream's
// window and releases its head exactly as the merge does without
// producers (the window full, or the files read), into batches that it
// hands the merge over a channel. The merge writes them and gives each
// batch back, its buffers then reused by the producer (the window's
// free lists). Which packets a stream releases, in which order, depends
// on its files and its window's limit alone (stream.buf), so the output
// is the same byte for byte with producers as without.
//
// Memory: besides the window, a stream's batches hold the packets
// released and not yet given back: at most batchCount batches of
// batchPackets packets and batchBytes(limit) bytes (and one packet).
const (
	batchPackets = 256
	batchCount   = 4 // 2 queued, 1 merged, 1 filled
	maxBatch     = 256 << 10
)

// batchBytes bounds the buffers of a batch of a stream whose window
// is limit bytes: 1/64 of it, at most maxBatch.
func batchBytes(limit int64) int64 { return min(limit/64, maxBatch) }

// freeSlack is what a window of limit bytes may keep in its free lists
// beyond it, so that a mix of sizes finds a buffer of its size
// released; producers add what their batches hold.
func freeSlack(limit int64) int64 { return limit / 32 }

// batch is packets a producer released, in order.
type batch struct {
	pkts  []pkt
	bytes int64   // what the window counted for the packets' bytes (classSize)
	evs   []event // in the order kept
	err   error   // the stream ends with it after pkts
	end   bool    // the stream ends after pkts
}

// event is a file's statistics block, or an interface the query does
// not select (Result.Unselected), to be kept once the merge has written
// after packets of the stream.
type event struct {
	after      uint64
	st         stats
	unselected string // the interface's name; "": st
}

// producer fills a stream from its own goroutine; the merge's side of
// it is b, i, ev and written.
type producer struct {
	s     *stream
	ch    chan *batch // filled, to the merge
	back  chan *batch // written, back to the producer
	spare []*batch
	cur   *batch // being filled
	stop  <-chan struct{}
	max   int64 // batchBytes

	b       *batch // the merge's
	i, ev   int    // b.pkts[i] is the stream's head, b.evs[ev] its next event
	written uint64 // packets of the stream written
}

func newProducer(s *stream, stop <-chan struct{}) *producer {
	p := &producer{s: s, ch: make(chan *batch, batchCount-2), back: make(chan *batch, batchCount+1),
		stop: stop, max: max(batchBytes(s.limit), 1)}
	for range batchCount {
		p.spare = append(p.spare, &batch{pkts: make([]pkt, 0, batchPackets)})
	}
	s.prod = p
	s.kit.plainDirect = true
	s.res = new(Result)
	s.filter = s.q.filter.Clone()
	s.slack = freeSlack(s.limit) + batchCount*p.max
	return p
}

// event keeps the statistics blocks sts, read once after packets of
// the stream were released, in the batch being filled.
func (p *producer) event(after uint64, sts []stats) {
	for _, st := range sts {
		p.cur.evs = append(p.cur.evs, event{after: after, st: st})
	}
}

// run fills batches and hands them to the merge until the stream ends
// (with the files read or an error) or the merge stops.
func (p *producer) run(ctx context.Context) {
	for {
		b := p.get()
		if b == nil {
			return
		}
		p.cur = b
		b.end, b.err = p.fill(ctx, b)
		p.cur = nil
		select {
		case p.ch <- b:
		case <-p.stop:
			return
		}
		if b.end {
			return
		}
	}
}

// fill releases the stream's packets into b, as the merge without
// producers would one at a time, until b is full or the stream ends.
func (p *producer) fill(ctx context.Context, b *batch) (end bool, err error) {
	s := p.s
	var n int64
	for {
		if err := s.fill(ctx); err != nil {
			return true, err
		}
		if s.empty() {
			return true, nil
		}
		b.pkts = append(b.pkts, pkt{})
		v := &b.pkts[len(b.pkts)-1]
		s.popInto(v)
		c := classSize(len(v.data))
		s.mem -= c
		s.flight += c
		b.bytes += c
		n += c
		if len(b.pkts) == batchPackets || n >= p.max {
			return false, nil
		}
	}
}

// get returns an empty batch, nil once the merge stops; the batches
// given back are emptied, their buffers put on the free lists.
func (p *producer) get() *batch {
	for {
		select {
		case b := <-p.back:
			p.recycle(b)
			continue
		default:
		}
		break
	}
	if len(p.spare) == 0 {
		select {
		case b := <-p.back:
			p.recycle(b)
		case <-p.stop:
			return nil
		}
	}
	b := p.spare[len(p.spare)-1]
	p.spare = p.spare[:len(p.spare)-1]
	return b
}

func (p *producer) recycle(b *batch) {
	for i := range b.pkts {
		p.s.drop(&b.pkts[i]) // which clears its references
	}
	p.s.flight -= b.bytes
	clear(b.evs)
	b.pkts, b.evs, b.bytes = b.pkts[:0], b.evs[:0], 0
	p.spare = append(p.spare, b)
}

// mergeEntP is a producer in the merge's heap with its head's timestamp.
type mergeEntP struct {
	ts   int64
	rank int
	p    *producer
}

// prodHeap is minHeap[mergeEntP] with its order written out, not
// called through a func value: the merge reorders it once a packet.
type prodHeap struct{ s []mergeEntP }

func entLess(a, b *mergeEntP) bool { return a.ts < b.ts || a.ts == b.ts && a.rank < b.rank }

func (h *prodHeap) len() int { return len(h.s) }

func (h *prodHeap) push(v mergeEntP) {
	h.s = append(h.s, v)
	for i := len(h.s) - 1; i > 0; {
		p := (i - 1) / 2
		if !entLess(&h.s[i], &h.s[p]) {
			break
		}
		h.s[i], h.s[p] = h.s[p], h.s[i]
		i = p
	}
}

func (h *prodHeap) pop() {
	n := len(h.s) - 1
	h.s[0] = h.s[n]
	h.s = h.s[:n]
	h.fix()
}

// fix restores the order after the least element changed.
func (h *prodHeap) fix() {
	s := h.s
	n := len(s)
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && entLess(&s[r], &s[l]) {
			m = r
		}
		if !entLess(&s[m], &s[i]) {
			return
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
}

// mergeProduced is merge with a producer per stream: it writes the
// streams' packets in timestamp order until they end or a limit is
// reached, then stops the producers and waits for them to end.
func (q *query) mergeProduced(ctx context.Context, streams []*stream) error {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	ps := make([]*producer, len(streams))
	for i, s := range streams {
		ps[i] = newProducer(s, stop)
	}
	for _, p := range ps {
		wg.Go(func() { p.run(ctx) })
	}
	defer func() {
		close(stop)
		wg.Wait()
		for _, s := range streams {
			q.res.addReads(s.res)
			s.res, s.prod = &q.res, nil
		}
	}()
	var h prodHeap
	for _, p := range ps {
		ok, err := q.nextBatch(ctx, p)
		if err != nil {
			return err
		}
		if ok {
			h.push(mergeEntP{ts: p.b.pkts[0].ts, rank: p.s.rank, p: p})
		}
	}
	for h.len() > 0 {
		p := h.s[0].p
		if q.cfg.Count > 0 && q.res.Packets >= q.cfg.Count {
			q.res.Stopped = "count"
			return nil
		}
		ok, err := q.writePacket(p.s.agent, &p.b.pkts[p.i])
		if err != nil || !ok {
			return err
		}
		p.i++
		p.written++
		if p.ev < len(p.b.evs) {
			q.keepEvents(p)
		}
		if p.i == len(p.b.pkts) {
			if ok, err = q.nextBatch(ctx, p); err != nil {
				return err
			}
			if !ok {
				h.pop()
				continue
			}
		}
		h.s[0].ts = p.b.pkts[p.i].ts
		h.fix()
	}
	return ctx.Err()
}

// nextBatch gives p's batch, all written, back and takes the next one
// that holds packets; false when the stream ends, with its error.
func (q *query) nextBatch(ctx context.Context, p *producer) (bool, error) {
	for p.b == nil || p.i == len(p.b.pkts) {
		if p.b != nil {
			if p.b.err != nil || p.b.end {
				return false, p.b.err
			}
			p.back <- p.b // never blocks: it holds every batch
		}
		select {
		case p.b = <-p.ch:
		case <-ctx.Done():
			p.b = nil
			return false, ctx.Err()
		}
		p.i, p.ev = 0, 0
		q.keepEvents(p)
	}
	return true, nil
}

// keepEvents keeps p's events due once the packets of its
// stream written so far are.
func (q *query) keepEvents(p *producer) {
	for ; p.ev < len(p.b.evs) && p.b.evs[p.ev].after <= p.written; p.ev++ {
		if e := &p.b.evs[p.ev]; e.unselected != "" {
			q.res.noteUnselected(e.unselected)
		} else {
			q.stats = append(q.stats, e.st)
		}
	}
}

// addReads adds what o counts of the files read to r.
func (r *Result) addReads(o *Result) {
	r.FilesRead += o.FilesRead
	r.FilesSkipped += o.FilesSkipped
	r.BytesRead += o.BytesRead
	r.FilesIndexed += o.FilesIndexed
	r.FilesScanned += o.FilesScanned
	r.BlocksRead += o.BlocksRead
	r.BlocksSkipped += o.BlocksSkipped
}
