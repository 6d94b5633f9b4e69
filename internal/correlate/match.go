package correlate

// packet is one packet the matcher holds while it is in the window.
type packet struct {
	agent int
	iface int // the caller's interface number, for emit
	ts    int64
	orig  uint32
	data  []byte // the captured bytes, kept only when the matcher emits
	key   Key
	nth   int  // occurrence number of key at agent
	lost  bool // seen at agent and, in some pair, never at the other
}

// entry is the state of one key while occurrences of it are in the
// window.
type entry struct {
	occ    [][]*packet // per agent: occurrences in the window, oldest first
	next   []int       // per agent: occurrence number of the next to arrive
	cur    []int       // [x*n+y]: first occurrence at x neither matched with y nor resolved
	paired []bool      // per pair: an occurrence was matched in it
}

// pairState counts one pair of agents, From (the lower index) and To.
type pairState struct {
	matched, fromNotTo, toNotFrom, dupFrom, dupTo int64
	delay                                         hist // tTo - tFrom
}

// matcher matches the packets of n agents, given in timestamp order,
// pair by pair. Occurrences of one key are matched in order within the
// window: the first at x with the first at y, and so on. An occurrence
// not matched in a pair when it leaves the window is seen-at-x-never-
// at-y, or a duplicate when another occurrence of its key was matched
// in that pair. It holds the packets of the last window (and a key
// entry for each key among them), nothing more: memory is bounded by
// the packets in the window, whatever the length of the input. Not
// safe for concurrent use.
type matcher struct {
	n      int
	window int64
	h      hasher
	keys   map[Key]*entry
	fifo   []*packet // the packets in the window, in arrival order
	head   int
	pairs  []*pairState // pairIndex(i, j), i < j
	counts []int64      // packets per agent
	// emit, if set, gets each packet seen at its agent and never at
	// another of some pair, in arrival order, once it left the window;
	// the packet's data is valid only during the call.
	emit  func(p *packet) error
	freeP []*packet
	freeE []*entry
}

func newMatcher(n int, window int64, emit func(*packet) error) *matcher {
	m := &matcher{n: n, window: window, h: newHasher(), keys: map[Key]*entry{}, counts: make([]int64, n), emit: emit}
	for range n * (n - 1) / 2 {
		m.pairs = append(m.pairs, &pairState{})
	}
	return m
}

// pairIndex numbers the pairs (0,1), (0,2), .. (0,n-1), (1,2), ..
func (m *matcher) pairIndex(i, j int) int {
	if i > j {
		i, j = j, i
	}
	return i*(2*m.n-i-1)/2 + j - i - 1
}

// add takes the next packet, of agent, at timestamp ts (not before the
// previous one's; an earlier one is taken as at the previous time). It
// copies data if it emits.
func (m *matcher) add(agent, iface int, ts int64, orig uint32, linkType uint16, data []byte) error {
	if err := m.expire(ts); err != nil {
		return err
	}
	p := m.newPacket()
	p.agent, p.iface, p.ts, p.orig = agent, iface, ts, orig
	p.key = m.h.KeyOf(linkType, data)
	if m.emit != nil {
		p.data = append(p.data[:0], data...)
	}
	m.counts[agent]++
	e := m.keys[p.key]
	if e == nil {
		e = m.newEntry()
		m.keys[p.key] = e
	}
	x, n := agent, m.n
	p.nth = e.next[x]
	e.next[x]++
	e.occ[x] = append(e.occ[x], p)
	for y := range n {
		if y == x {
			continue
		}
		c := e.cur[y*n+x]
		if c >= e.next[y] {
			continue // nothing of y waits for x: p waits
		}
		q := e.occ[y][c-(e.next[y]-len(e.occ[y]))]
		e.cur[y*n+x], e.cur[x*n+y] = c+1, p.nth+1
		pi := m.pairIndex(x, y)
		e.paired[pi] = true
		ps := m.pairs[pi]
		ps.matched++
		if x < y {
			ps.delay.add(q.ts - p.ts)
		} else {
			ps.delay.add(p.ts - q.ts)
		}
	}
	m.fifo = append(m.fifo, p)
	return nil
}

// expire resolves the packets that left the window at time now: more
// than the window before it.
func (m *matcher) expire(now int64) error {
	for m.head < len(m.fifo) && now-m.fifo[m.head].ts > m.window {
		if err := m.resolve(); err != nil {
			return err
		}
	}
	return nil
}

// flush resolves every packet left: the input ended.
func (m *matcher) flush() error {
	for m.head < len(m.fifo) {
		if err := m.resolve(); err != nil {
			return err
		}
	}
	return nil
}

// resolve takes the oldest packet out of the window: in each pair where
// it is not matched, it is a duplicate or seen-never-at.
func (m *matcher) resolve() error {
	q := m.fifo[m.head]
	m.fifo[m.head] = nil
	m.head++
	if m.head >= 1024 && 2*m.head >= len(m.fifo) {
		m.fifo = m.fifo[:copy(m.fifo, m.fifo[m.head:])]
		m.head = 0
	}
	e, x, n := m.keys[q.key], q.agent, m.n
	for y := range n {
		if y == x || q.nth < e.cur[x*n+y] {
			continue
		}
		e.cur[x*n+y] = q.nth + 1
		pi := m.pairIndex(x, y)
		ps := m.pairs[pi]
		switch {
		case e.paired[pi] && x < y:
			ps.dupFrom++
		case e.paired[pi]:
			ps.dupTo++
		case x < y:
			ps.fromNotTo++
			q.lost = true
		default:
			ps.toNotFrom++
			q.lost = true
		}
	}
	// q is the oldest occurrence of its key at x: the window leaves in
	// arrival order.
	e.occ[x] = e.occ[x][:copy(e.occ[x], e.occ[x][1:])]
	if m.empty(e) {
		delete(m.keys, q.key)
		m.freeE = append(m.freeE, e)
	}
	var err error
	if q.lost && m.emit != nil {
		err = m.emit(q)
	}
	m.freeP = append(m.freeP, q)
	return err
}

func (m *matcher) empty(e *entry) bool {
	for _, o := range e.occ {
		if len(o) > 0 {
			return false
		}
	}
	return true
}

func (m *matcher) newPacket() *packet {
	if k := len(m.freeP); k > 0 {
		p := m.freeP[k-1]
		m.freeP = m.freeP[:k-1]
		*p = packet{data: p.data[:0]}
		return p
	}
	return &packet{}
}

func (m *matcher) newEntry() *entry {
	if k := len(m.freeE); k > 0 {
		e := m.freeE[k-1]
		m.freeE = m.freeE[:k-1]
		clear(e.next)
		clear(e.cur)
		clear(e.paired)
		return e // occ are empty
	}
	n := m.n
	return &entry{occ: make([][]*packet, n), next: make([]int, n), cur: make([]int, n*n), paired: make([]bool, n*(n-1)/2)}
}
