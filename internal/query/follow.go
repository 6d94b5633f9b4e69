package query

import (
	"cmp"
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// round counts the packets held that one merge round read, and when it
// read them.
type round struct {
	id   uint64
	at   time.Time
	held int
}

// hold records a packet taken into a window in the current round and
// returns the round's number (0 outside follow mode).
func (q *query) hold() uint64 {
	if !q.cfg.Follow {
		return 0
	}
	if n := len(q.rounds); n == 0 || q.rounds[n-1].id != q.round {
		q.rounds = append(q.rounds, round{id: q.round, at: q.now})
	}
	q.rounds[len(q.rounds)-1].held++
	return q.round
}

// unhold records that a packet of round r left its window.
func (q *query) unhold(r uint64) {
	if !q.cfg.Follow {
		return
	}
	i, ok := slices.BinarySearchFunc(q.rounds, r, func(x round, r uint64) int { return cmp.Compare(x.id, r) })
	if !ok {
		return
	}
	q.rounds[i].held--
	n := 0
	for n < len(q.rounds) && q.rounds[n].held == 0 {
		n++
	}
	if n > 0 {
		q.rounds = append(q.rounds[:0], q.rounds[n:]...)
	}
}

// oldestHeld returns when the packet held longest was read; ok false
// when none is held.
func (q *query) oldestHeld() (time.Time, bool) {
	if len(q.rounds) == 0 {
		return time.Time{}, false
	}
	return q.rounds[0].at, true
}

// follow is merge in follow mode: rounds of reading what every stream
// has now and writing what may be written, until Until is passed, a
// limit is reached or ctx ends. Each round: list the root and the
// agents' directories again (every FollowPoll), fill every stream
// (until its window is full or it has nothing more now), then write the
// least held packet while releasable says so, the statistics blocks of
// the files ended, and flush. A round that reads and writes nothing
// waits FollowPoll.
func (q *query) follow(ctx context.Context) error {
	var listed time.Time
	tm := time.NewTimer(0)
	defer tm.Stop()
	h := minHeap[*stream]{less: func(a, b *stream) bool {
		x, y := a.head(), b.head()
		return x.ts < y.ts || x.ts == y.ts && a.rank < b.rank
	}}
	for {
		q.now = time.Now()
		q.round++
		if q.now.Sub(listed) >= q.poll {
			listed = q.now
			if err := q.addAgents(); err != nil {
				return err
			}
			for _, s := range q.all {
				if err := s.relist(); err != nil {
					return err
				}
			}
		}
		if ctx.Err() != nil {
			return q.drain(&h)
		}
		reads, written := q.readsSoFar(), q.res.Packets
		for _, s := range q.all {
			if err := s.fill(ctx); err != nil {
				if ctx.Err() != nil {
					return q.drain(&h)
				}
				return err
			}
			if q.until != maxTS && s.seen && s.high-int64(q.delay) >= q.until {
				s.close() // its packets are past Until, by more than the delay
			}
		}
		ending := q.ending()
		h.s = h.s[:0]
		for _, s := range q.all {
			if !s.empty() {
				h.push(s)
			}
		}
		for h.len() > 0 {
			if q.cfg.Count > 0 && q.res.Packets >= q.cfg.Count {
				q.res.Stopped = "count"
				return nil
			}
			s := h.s[0]
			if !ending && !q.releasable(s.head()) {
				break
			}
			p := s.pop()
			ok, err := q.writePacket(s.agent, &p)
			q.unhold(p.round)
			s.release(&p)
			if err != nil || !ok {
				return err
			}
			if err := s.fill(ctx); err != nil {
				if ctx.Err() != nil {
					return q.drain(&h)
				}
				return err
			}
			if s.empty() {
				h.pop()
			} else {
				h.fix()
			}
		}
		if err := q.writeStats(); err != nil {
			return err
		}
		q.stats = q.stats[:0]
		if err := q.flush(); err != nil {
			return err
		}
		if ending && h.len() == 0 {
			return nil
		}
		if q.readsSoFar() != reads || q.res.Packets != written {
			continue
		}
		tm.Reset(q.poll)
		select {
		case <-ctx.Done():
		case <-tm.C:
		}
	}
}

// maxTS is an unbounded Until.
const maxTS = int64(^uint64(0) >> 1)

// ending reports whether the follow ends this round, writing all it
// holds: Until is bounded and every stream's packets are past it (by
// the delay: see fill's callers), or the clock is FollowDelay past it
// and no stream is still reading what is there.
func (q *query) ending() bool {
	if q.until == maxTS {
		return false
	}
	all := len(q.all) > 0
	for _, s := range q.all {
		if !s.done {
			all = false
		}
	}
	if all {
		return true
	}
	if q.now.UnixNano()-int64(q.delay) < q.until {
		return false
	}
	for _, s := range q.all {
		if !s.done && s.state == fillBehind {
			return false
		}
	}
	return true
}

// releasable reports whether p, the least packet held, may be written
// now: every stream still read has its window full, has read a packet
// FollowDelay later than p, or is caught up, has read nothing for
// FollowDelay (a silent agent) and p is FollowDelay older than the
// clock (a packet the silent agent captures now comes later than p);
// or a packet held was read FollowDelay ago while no stream is still
// reading what is there.
func (q *query) releasable(p *pkt) bool {
	all := true
	behind := false
	for _, s := range q.all {
		if s.done {
			continue
		}
		switch {
		case s.state == fillFull:
		case s.seen && s.high-int64(q.delay) >= p.ts:
		case s.state == fillCaught && q.now.Sub(s.lastRead) >= q.delay && p.ts <= q.now.UnixNano()-int64(q.delay):
		default:
			all = false
		}
		behind = behind || s.state == fillBehind
	}
	if all {
		return true
	}
	at, ok := q.oldestHeld()
	return ok && !behind && q.now.Sub(at) >= q.delay
}

// drain writes what the streams hold, in order, when ctx ended: the
// output ends with every packet read.
func (q *query) drain(h *minHeap[*stream]) error {
	h.s = h.s[:0]
	for _, s := range q.all {
		if !s.empty() {
			h.push(s)
		}
	}
	for h.len() > 0 {
		s := h.s[0]
		more, err := q.writeHead(s)
		if err != nil || !more {
			return err
		}
		if s.empty() {
			h.pop()
		} else {
			h.fix()
		}
	}
	q.res.Stopped = "interrupted"
	return nil
}

// readsSoFar is the packets read by all streams.
func (q *query) readsSoFar() int {
	n := 0
	for _, s := range q.all {
		n += s.reads
	}
	return n
}

// addAgents adds the streams of agents selected whose directories
// appeared since the last look, and shares ReorderMem again.
func (q *query) addAgents() error {
	agents, err := layout.Agents(q.cfg.Dir)
	if err != nil {
		return err
	}
	added := false
	for _, name := range agents {
		if !q.agentSelected(name) || slices.ContainsFunc(q.all, func(s *stream) bool { return s.agent == name }) {
			continue
		}
		files, err := layout.AgentFiles(q.cfg.Dir, name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		s := newStream(q, name, 0, files, 0)
		s.lastRead = q.now
		q.all = append(q.all, s)
		added = true
	}
	if !added {
		return nil
	}
	slices.SortFunc(q.all, func(a, b *stream) int { return strings.Compare(a.agent, b.agent) })
	limit := q.streamLimit(len(q.all))
	for i, s := range q.all {
		s.rank, s.limit = i, limit
	}
	q.res.Agents = len(q.all)
	return nil
}

// relist lists the agent's directory again for files written after the
// last one taken.
func (s *stream) relist() error {
	if s.done {
		return nil
	}
	files, err := layout.AgentFiles(s.q.cfg.Dir, s.agent)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	i := 0
	for i < len(files) && strings.TrimSuffix(files[i].Path, layout.PartSuffix) <= s.lastKey {
		i++
	}
	s.files = append(s.files[:0], files[i:]...)
	s.next = 0
	s.cov.listed += len(s.files)
	if len(s.files) > 0 && s.cur != nil && s.cur.tail != nil && s.newerAt.IsZero() {
		s.newerAt = s.q.now
	}
	return nil
}

// abandon reports whether the followed file, read to the end its tail
// found, is to be read no further: a newer file of the agent was listed
// FollowDelay (and at least two polls) ago and the file is still not
// published. The store publishes a file before it opens the next, and
// the tail sees a file published at its next poll: this one was left
// unfinished (a collector that stopped, a publish that failed).
func (s *stream) abandon() bool {
	return s.cur.caught && !s.newerAt.IsZero() && s.q.now.Sub(s.newerAt) >= max(s.q.delay, 2*s.q.poll)
}
