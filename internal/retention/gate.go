package retention

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// The write gate holds writers back when deletion falls behind, so that
// the size and free rules are never overshot by more than a fraction of
// a rotation file (their slack, below), whatever the ingest rate.
//
// Deletion starts at a high watermark below each limit (watermarks), so
// at ordinary rates the gate never closes. It closes when the bytes
// written since retention last looked would take usage past the limit
// plus the slack: at a restart onto a nearly full disk before the index
// is rebuilt, or when writers outrun unlinks on a machine with every
// core busy. A writer then waits in Writer.WriteBatch, before it writes,
// until retention has deleted enough (it is woken after every deletion)
// or says it cannot free enough (the gate opens for that rule, and a
// full disk refuses writes as before). A write waits at most maxHold,
// and not at all once retention has not looked for maxHold (a stalled
// index rebuild): the gate bounds overshoot, it never stops ingest.
//
// The agent rule is not gated: its watermarks bound it. Nor is a shared
// root (Config.Shared): its one deleting process cannot hold the others'
// writes, so there the watermarks alone bound usage.
type writeGate struct {
	allow  atomic.Int64 // bytes writers may write before they wait
	looked atomic.Int64 // when the allowance was last set, Unix ns; 0: never
	mu     sync.Mutex
	opened chan struct{} // closed when the allowance is next set; guarded by mu
	counts *Counters     // Holds, HeldNanos
}

// maxHold is the longest a write waits at the gate, and how long
// retention may go without setting the allowance before writes stop
// waiting: the collector's dead-peer bound.
const maxHold = 10 * time.Second

// newWriteGate returns an open gate: until retention first sets the
// allowance (Run), writes do not wait.
func newWriteGate(counts *Counters) *writeGate {
	g := &writeGate{opened: make(chan struct{}), counts: counts}
	g.allow.Store(math.MaxInt64)
	return g
}

// set sets the allowance and wakes the writers that wait.
func (g *writeGate) set(allow int64) {
	g.allow.Store(allow)
	g.looked.Store(time.Now().UnixNano())
	g.mu.Lock()
	close(g.opened)
	g.opened = make(chan struct{})
	g.mu.Unlock()
}

// admit takes n bytes of the allowance, first waiting (and calling
// wake, so retention looks at once) while there is not enough.
func (g *writeGate) admit(n int64, wake func()) {
	if g.allow.Add(-n) >= 0 {
		return
	}
	g.allow.Add(n)
	start := time.Now()
	deadline := start.Add(maxHold)
	t := time.NewTimer(maxHold)
	defer t.Stop()
	for {
		g.mu.Lock()
		opened := g.opened
		g.mu.Unlock()
		if g.allow.Add(-n) >= 0 {
			break
		}
		g.allow.Add(n)
		now := time.Now()
		if !now.Before(deadline) || now.Sub(time.Unix(0, g.looked.Load())) > maxHold {
			g.allow.Add(-n) // go ahead: retention is stuck, or slower than a peer would wait
			break
		}
		wake()
		select {
		case <-opened:
		case <-t.C:
		}
	}
	g.counts.Holds.Add(1)
	g.counts.HeldNanos.Add(uint64(time.Since(start)))
}

// slack is how far the gate lets usage go past limit: half the margin
// of watermarks (a tenth of the limit or one rotation file, whichever
// is smaller).
func (r *Enforcer) slack(limit int64) int64 { return slackOf(limit, r.rotate) }

// gated reports whether a size or free rule is on.
func (c *Config) gated() bool {
	return c.MaxBytes > 0 || c.FreePercent > 0 || c.FreeBytes > 0
}

// setAllowance sets the gate from usage now: the least, over the size
// and free rules that are on and not short, of limit plus slack less
// usage. The size rule counts only once the index is loaded (before, the
// root's usage is not known).
func (r *Enforcer) setAllowance() {
	c := &r.cfg
	if !c.gated() || r.shared.on {
		return // a shared root's retention leader cannot hold the other processes' writes: no gate
	}
	r.mu.Lock()
	sizeShort, freeShort := !r.short[RuleSize].IsZero(), !r.short[RuleFree].IsZero()
	r.mu.Unlock()
	allow := int64(math.MaxInt64)
	if c.MaxBytes > 0 && !sizeShort && r.loaded.Load() {
		allow = min(allow, c.MaxBytes+r.slack(c.MaxBytes)-r.rootBytes())
	}
	if (c.FreePercent > 0 || c.FreeBytes > 0) && !freeShort {
		if size, avail, err := r.statfs(r.dir); err == nil {
			if limit := r.freeLimit(size); limit > 0 {
				allow = min(allow, limit+r.slack(limit)-(size-avail)-r.unseen())
			}
		}
	}
	r.gate.set(allow)
}

// admit waits at the gate until n more bytes of the agent may be
// written (see writeGate), and counts them in its usage until the next
// flush: a session commits (flushes) only every few MiB when busy, and
// what it wrote before must count against the size rules meanwhile.
func (a *Agent) admit(n int64) {
	a.r.gate.admit(n, a.r.wake)
	a.admitted.Add(n)
}

// flushed says that everything written is now counted in open.
func (a *Agent) flushed() {
	a.admitted.Store(0)
	a.buffered.Store(0)
}

// unseen is what the writers hold in their buffers, not yet on the
// filesystem: statfs does not count it yet.
func (r *Enforcer) unseen() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, a := range r.agents {
		n += a.buffered.Load()
	}
	return n
}

// wake wakes the retention goroutine, without blocking.
func (r *Enforcer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}
