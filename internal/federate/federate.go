package federate

import (
	"bufio"
	"cmp"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
)

// Outcomes of a server.
const (
	OutcomeOK          = "ok"          // answered to the end, its Result came
	OutcomeRefused     = "refused"     // said no: 4xx or 503, with its reason
	OutcomeUnreachable = "unreachable" // no connection: name, route, port
	OutcomeTimedOut    = "timed out"   // sent nothing for Config.Timeout
	OutcomeFailed      = "failed"      // failed after its answer began (or a 5xx)
)

// Server is what one server gave.
type Server struct {
	Server  string `json:"server"`           // HOST:PORT
	Outcome string `json:"outcome"`          // Outcome...
	Reason  string `json:"reason,omitempty"` // why, but for ok
	// Packets counts its packets written to the output.
	Packets int64 `json:"packets"`
	// Result is the server's own (its Pcapsync-Result trailer, as
	// decoded), for ok; nil otherwise.
	Result *query.Result `json:"result,omitempty"`
}

// Result is what a federated query did.
type Result struct {
	Packets int64 `json:"packets"` // written
	Bytes   int64 `json:"bytes"`   // of pcapng written
	// Stopped is "count" or "max-bytes" when a limit ended the output.
	Stopped string `json:"stopped"`
	// Late counts packets written after one with a later timestamp (a
	// server whose stream was not in time order).
	Late int64 `json:"late"`
	// Partial: a server failed and Config.Partial answered without it.
	Partial bool `json:"partial"`
	// StatsDropped counts statistics blocks beyond MaxStatsBytes.
	StatsDropped int      `json:"stats_dropped,omitempty"`
	Servers      []Server `json:"servers"`
}

// Covered reports whether the answer had something to answer from:
// some server's Result is covered, or a packet was written.
func (r Result) Covered() bool {
	if r.Packets > 0 {
		return true
	}
	for _, s := range r.Servers {
		if s.Result != nil && covered(*s.Result) {
			return true
		}
	}
	return false
}

// String is r on one line, for people; the servers one per line after
// it.
func (r Result) String() string {
	s := fmt.Sprintf("%d packets, %d bytes written from %d servers", r.Packets, r.Bytes, len(r.Servers))
	if r.Late > 0 {
		s += fmt.Sprintf("; %d late (written after a later packet)", r.Late)
	}
	if r.Stopped != "" {
		s += "; stopped by --" + r.Stopped
	}
	if r.Partial {
		s += "; partial: a server failed"
	}
	if r.StatsDropped > 0 {
		s += fmt.Sprintf("; %d statistics blocks dropped", r.StatsDropped)
	}
	for _, v := range r.Servers {
		s += "\n  " + v.String()
	}
	return s
}

// String is the server's line: "b:7780: ok, 12 packets: ..." or
// "b:7780: failed after 12 packets: reason".
func (v Server) String() string {
	s := v.head()
	if v.Reason != "" {
		s += ": " + v.Reason
	}
	if v.Result != nil {
		s += "; " + v.Result.String()
	}
	return s
}

// head is the server's line without its reason and Result.
func (v Server) head() string {
	s := v.Server + ": " + v.Outcome
	switch {
	case v.Outcome == OutcomeOK:
		s += fmt.Sprintf(", %d packets", v.Packets)
	case v.Packets > 0:
		s += fmt.Sprintf(" after %d packets", v.Packets)
	}
	return s
}

// Run asks every server of cfg at once and writes the packets they
// answer to w as one pcapng section, merged in timestamp order (the
// package doc). A server that fails fails the query with an error
// wrapping ErrServer and naming it, unless cfg.Partial; every server
// failing is ErrNoServer. An error after writing began leaves w
// holding a valid pcapng of what was written, flushed; a failure known
// before writes nothing. The Result lists every server's outcome, in
// cfg's order, whatever the error.
func Run(ctx context.Context, cfg Config, w io.Writer) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	budget := &atomic.Int64{}
	budget.Store(MaxStatsBytes)
	srcs := make([]*source, len(cfg.Servers))
	var wg sync.WaitGroup
	for i, cc := range cfg.Servers {
		srcs[i] = newSource(i, cc, cfg.timeout(), budget)
		wg.Go(func() { srcs[i].open(ctx) })
	}
	wg.Wait()
	return mergeSources(ctx, cfg, srcs, w)
}

// mergeSources merges the answers of srcs, opened, to w.
func mergeSources(ctx context.Context, cfg Config, srcs []*source, w io.Writer) (Result, error) {
	m := &merger{cfg: cfg, srcs: srcs}
	defer m.close()
	err := m.run(ctx, w)
	return m.result(), err
}

// Each is Run giving the merged packets to fn instead of writing them
// (pcapsync correlate --from): the servers' packets in Run's order,
// each on one interface per server and interface (Iface numbered from
// 0 in the order of first packets, Interface as Run's output describes
// it: the server's name, "server ADDR" in the description; Agent the
// part of the name before ':'), Data valid until fn returns. cfg.Count
// bounds the packets given; MaxBytes and the statistics blocks do not
// apply. A server's failure is as Run's (ErrServer naming it, unless
// cfg.Partial; ErrNoServer); an error of fn ends the merge and is
// returned as it is.
func Each(ctx context.Context, cfg Config, fn func(*query.Packet) error) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	srcs := make([]*source, len(cfg.Servers))
	var wg sync.WaitGroup
	for i, cc := range cfg.Servers {
		srcs[i] = newSource(i, cc, cfg.timeout(), &atomic.Int64{}) // no statistics kept
		wg.Go(func() { srcs[i].open(ctx) })
	}
	wg.Wait()
	m := &merger{cfg: cfg, srcs: srcs, each: fn}
	defer m.close()
	err := m.check()
	if err == nil {
		m.heads()
		err = m.merge(ctx)
	}
	return m.result(), err
}

// merger is one Run's merge.
type merger struct {
	cfg    Config
	srcs   []*source
	w      *pcapfile.NgWriter
	res    Result
	order  srcHeap
	lastTS int64    // the latest timestamp written
	cuts   []string // servers failed since the last packet written

	each   func(*query.Packet) error // Each's: the packets to it, not to w
	ifaces []*pcapfile.Interface     // Each's interfaces, by Iface
	pk     query.Packet
}

func (m *merger) close() {
	for _, s := range m.srcs {
		s.close()
	}
}

// failed returns the first failed server's error, naming it.
func (m *merger) failed() error {
	for _, s := range m.srcs {
		if s.err != nil {
			return fmt.Errorf("%w: server %s: %w", ErrServer, s.out.head(), s.err)
		}
	}
	return nil
}

// check fails the merge before it begins: a server failed (but with
// Partial), or every server did.
func (m *merger) check() error {
	if err := m.failed(); err != nil && !m.cfg.Partial {
		return err
	}
	if !slices.ContainsFunc(m.srcs, func(s *source) bool { return s.err == nil }) {
		var errs []error
		for _, s := range m.srcs {
			errs = append(errs, fmt.Errorf("server %s: %w", s.out.head(), s.err))
		}
		return fmt.Errorf("%w: %w", ErrNoServer, errors.Join(errs...))
	}
	m.res.Partial = m.failed() != nil
	return nil
}

// heads orders the servers that have a packet.
func (m *merger) heads() {
	for _, s := range m.srcs {
		if s.has {
			m.order = append(m.order, s)
		}
	}
	heap.Init(&m.order)
}

func (m *merger) run(ctx context.Context, w io.Writer) error {
	if err := m.check(); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 256<<10)
	var err error
	if m.w, err = pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{OS: "Linux", UserAppl: "pcapsync query", Comment: m.describe()}); err != nil {
		return err
	}
	m.heads()
	err = m.merge(ctx)
	if err == nil {
		err = m.writeStats()
	}
	err = errors.Join(err, m.markCut())
	m.res.Bytes = m.w.Written()
	if ferr := bw.Flush(); ferr != nil {
		err = errors.Join(err, fmt.Errorf("writing the output: %w", ferr))
	}
	return err
}

// merge writes the heads in order until the streams end, a limit is
// reached or (without Partial) a server fails.
func (m *merger) merge(ctx context.Context) error {
	for m.order.Len() > 0 {
		s := m.order[0]
		more, err := m.write(s)
		if err != nil || !more {
			return err
		}
		s.advance()
		switch {
		case s.has:
			heap.Fix(&m.order, 0)
		default:
			heap.Pop(&m.order)
			if s.err != nil {
				s.started = true
				m.res.Partial = m.cfg.Partial
				if len(m.cuts) < 64 {
					m.cuts = append(m.cuts, limit("cut here: "+s.cutNote(), 1<<10))
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !m.cfg.Partial {
					return m.failed()
				}
			}
		}
	}
	return ctx.Err()
}

// write writes s's head; false once Count or MaxBytes ends the output.
func (m *merger) write(s *source) (bool, error) {
	if m.cfg.Count > 0 && m.res.Packets >= m.cfg.Count {
		m.res.Stopped = "count"
		return false, nil
	}
	if m.each != nil {
		return true, m.give(s)
	}
	o := s.outs[s.p.Interface]
	var note string // the first packet after a server's failure says so
	if len(m.cuts) > 0 {
		note = limit(strings.Join(m.cuts, "\n"), maxComment)
	}
	if m.cfg.MaxBytes > 0 {
		need := pcapfile.EPBSize(len(s.p.Data))
		if note != "" {
			need += 8 + int64(len(note)+(-len(note)&3))
		}
		if o < 0 {
			need += pcapfile.InterfaceSize(s.iface(s.p.Interface))
		}
		if m.w.Written()+need > m.cfg.MaxBytes {
			m.res.Stopped = "max-bytes"
			return false, nil
		}
	}
	o, err := m.ensure(s, s.p.Interface)
	if err != nil {
		return false, err
	}
	if note != "" {
		m.cuts = m.cuts[:0]
		if err := m.w.WritePacketComment(o, s.p.Timestamp, s.p.OrigLen, s.p.Data, note); err != nil {
			return false, err
		}
	} else if err := m.w.WritePacket(o, s.p.Timestamp, s.p.OrigLen, s.p.Data); err != nil {
		return false, err
	}
	m.count(s)
	return true, nil
}

// count counts s's head as written.
func (m *merger) count(s *source) {
	if m.res.Packets > 0 && s.p.Timestamp < m.lastTS {
		m.res.Late++
	} else {
		m.lastTS = s.p.Timestamp
	}
	s.last = s.p.Timestamp
	s.out.Packets++
	m.res.Packets++
}

// give gives s's head to Each's fn, on its interface (numbered as it
// first comes).
func (m *merger) give(s *source) error {
	i := s.p.Interface
	if s.outs[i] < 0 {
		ifc := s.iface(i)
		s.outs[i] = len(m.ifaces)
		m.ifaces = append(m.ifaces, &ifc)
	}
	o := s.outs[i]
	m.pk = query.Packet{Agent: s.agent, Iface: o, Interface: m.ifaces[o], Timestamp: s.p.Timestamp, OrigLen: s.p.OrigLen, Data: s.p.Data}
	if err := m.each(&m.pk); err != nil {
		return err
	}
	m.count(s)
	return nil
}

// iface is the output's description of the server's interface i.
func (s *source) iface(i int) pcapfile.Interface {
	ifc := s.r.Interfaces()[i]
	d := "server " + s.cc.Addr
	if ifc.Description != "" {
		d += ": " + ifc.Description
	}
	ifc.Description = d
	return ifc
}

// ensure writes the server's interface i to the output if it is not
// yet, and returns its index there.
func (m *merger) ensure(s *source, i int) (int, error) {
	for len(s.outs) <= i {
		s.outs = append(s.outs, -1)
	}
	if o := s.outs[i]; o >= 0 {
		return o, nil
	}
	o, err := m.w.AddInterface(s.iface(i))
	s.outs[i] = o
	return o, err
}

// writeStats writes the servers' statistics blocks kept, in time order
// (ties in server order), as many as MaxBytes leaves room for.
func (m *merger) writeStats() error {
	var all []stat
	for _, s := range m.srcs {
		all = append(all, s.stats...)
		m.res.StatsDropped += s.dropped
	}
	slices.SortStableFunc(all, func(a, b stat) int { return cmp.Compare(a.st.Timestamp, b.st.Timestamp) })
	for _, st := range all {
		s := st.src
		if st.iface >= len(s.r.Interfaces()) {
			continue
		}
		if m.cfg.MaxBytes > 0 {
			need := pcapfile.StatsSize(st.st)
			if st.iface >= len(s.outs) || s.outs[st.iface] < 0 {
				need += pcapfile.InterfaceSize(s.iface(st.iface))
			}
			if m.w.Written()+need > m.cfg.MaxBytes {
				return nil
			}
		}
		o, err := m.ensure(s, st.iface)
		if err != nil {
			return err
		}
		if err := m.w.WriteStats(o, st.st); err != nil {
			return err
		}
	}
	return nil
}

// cutNote says that s failed and its later packets are missing.
func (s *source) cutNote() string {
	return fmt.Sprintf("server %s %s after %d packets: %s: its packets after this time are missing",
		s.cc.Addr, s.out.Outcome, s.out.Packets, s.out.Reason)
}

// markCut writes, for each server that failed once the output began, a
// statistics block on each of its interfaces written, whose comment
// says its packets were cut there and why (MaxBytes does not hold
// them back: the file must say it is incomplete).
func (m *merger) markCut() error {
	for _, s := range m.srcs {
		if !s.started {
			continue
		}
		c := limit("cut: "+s.cutNote(), 4<<10)
		for _, o := range s.outs {
			if o < 0 {
				continue
			}
			if err := m.w.WriteStats(o, pcapfile.InterfaceStats{Timestamp: s.last, Comment: c}); err != nil {
				return err
			}
		}
	}
	return nil
}

// maxComment bounds the section's comment (an option holds at most
// 65535 bytes).
const maxComment = 60 << 10

// describe is the section's comment: the query and its servers, each
// server's own section comments prefixed with it, the servers that
// failed before the output began.
func (m *merger) describe() string {
	q := m.cfg.Query
	if q == "" {
		q = "pcapsync query"
	}
	addrs := make([]string, len(m.srcs))
	for i, s := range m.srcs {
		addrs[i] = s.cc.Addr
	}
	lines := []string{fmt.Sprintf("federated over %d servers (%s): %s", len(m.srcs), strings.Join(addrs, ","), q)}
	for _, s := range m.srcs {
		if s.err != nil {
			lines = append(lines, fmt.Sprintf("partial: server %s", s.out.String()))
			continue
		}
		for _, c := range s.comments {
			for l := range strings.SplitSeq(c, "\n") {
				lines = append(lines, "server "+s.cc.Addr+": "+l)
			}
		}
	}
	return limit(strings.Join(lines, "\n"), maxComment)
}

// limit cuts s to at most n bytes of valid UTF-8, the cut said.
func limit(s string, n int) string {
	if len(s) <= n {
		return s
	}
	note := fmt.Sprintf(" ... (%d bytes left out)", len(s))
	cut := n - len(note)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + fmt.Sprintf(" ... (%d bytes left out)", len(s)-cut)
}

// result is the Result with every server's outcome.
func (m *merger) result() Result {
	r := m.res
	r.Servers = make([]Server, len(m.srcs))
	for i, s := range m.srcs {
		r.Servers[i] = s.out
		if s.out.Outcome == "" { // stopped by a limit, or the query's end
			r.Servers[i].Outcome = OutcomeOK
			r.Servers[i].Reason = "not read to its end: the output was complete"
		}
	}
	return r
}

// srcHeap orders the servers' heads: by timestamp, then agent name,
// then server order.
type srcHeap []*source

func (h srcHeap) Len() int { return len(h) }
func (h srcHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	if a.p.Timestamp != b.p.Timestamp {
		return a.p.Timestamp < b.p.Timestamp
	}
	if a.agent != b.agent {
		return a.agent < b.agent
	}
	return a.idx < b.idx
}
func (h srcHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *srcHeap) Push(x any)   { *h = append(*h, x.(*source)) }
func (h *srcHeap) Pop() any {
	old := *h
	s := old[len(old)-1]
	*h = old[:len(old)-1]
	return s
}
