//go:build linux

package difftest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen/capgen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
)

// mode is one way of running the query for a filter.
type mode struct {
	name    string
	noIndex bool     // --no-index
	window  bool     // --since and --until: the capture's capgen Range
	early   bool     // --since and --until: the capture's capgen EarlyRange
	reorder string   // --reorder-mem, "" for the default
	all     bool     // every agent at once (the merge, ties across agents), else --agent the capture's
	classes []string // only filters of these classes; nil: all
}

// allModes: every filter with and without the index, with and without
// a window; unfiltered and protocol queries also with a window on the
// earliest packets (which one capture in four holds at its end) and
// with the smallest reorder window (captures go back in time by more
// than it holds); every agent at once for the filters every link type
// may take.
var allModes = []mode{
	{name: "index"},
	{name: "noindex", noIndex: true},
	{name: "index-window", window: true},
	{name: "noindex-window", noIndex: true, window: true},
	{name: "index-reorder256K", reorder: "256K", classes: []string{"none", "proto"}},
	{name: "noindex-reorder256K", noIndex: true, reorder: "256K", classes: []string{"none", "proto"}},
	{name: "index-window-reorder256K", window: true, reorder: "256K", classes: []string{"none", "proto"}},
	{name: "noindex-window-reorder256K", noIndex: true, window: true, reorder: "256K", classes: []string{"none", "proto"}},
	{name: "index-early", early: true, classes: []string{"none", "proto"}},
	{name: "noindex-early", noIndex: true, early: true, classes: []string{"none", "proto"}},
	{name: "index-early-reorder256K", early: true, reorder: "256K", classes: []string{"none", "proto"}},
	{name: "noindex-early-reorder256K", noIndex: true, early: true, reorder: "256K", classes: []string{"none", "proto"}},
	{name: "agents-index-window", all: true, window: true, classes: []string{"none", "len", "host", "port", "proto", "octal"}},
	{name: "agents-noindex", all: true, noIndex: true, classes: []string{"none", "len", "host", "port", "proto", "octal"}},
}

// bounds returns the mode's window on c, ok false for none.
func (m mode) bounds(c *capgen.Capture) (since, until int64, ok bool) {
	switch {
	case m.window:
		since, until = c.Range()
	case m.early:
		since, until = c.EarlyRange()
	default:
		return 0, 0, false
	}
	return since, until, true
}

func (m mode) takes(f capgen.Filter) bool {
	return m.classes == nil || slices.Contains(m.classes, f.Class)
}

// pkt is a packet as compared: timestamp (ns), original length, bytes.
type pkt struct {
	ts   int64
	orig uint32
	data []byte
	from int // the capture (agent) it came from, for the merge
}

// result is what a tcpdump or a query gave: packets, or a refusal.
type result struct {
	pkts    []pkt
	refused bool
	msg     string // the refusal's first line
	raw     []byte // the output as written

	// rejectsAll: the refusal is libpcap's "expression rejects all
	// packets", an empty selection where one link type is concerned.
	rejectsAll bool
}

// empty takes a refusal for rejecting all packets as selecting none.
func (res result) empty() result {
	if res.rejectsAll {
		return result{}
	}
	return res
}

// diff is one query that did not give what tcpdump gives.
type diff struct {
	class, link, mode, kind string
	capture, filter, detail string
}

// compareAll runs every (capture, filter) job and then the every-agent
// jobs, jobs at a time.
func (r *trial) compareAll() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	sem := make(chan struct{}, max(1, *flagJobs))
	var wg sync.WaitGroup
	spawn := func(f func()) {
		wg.Add(1)
		sem <- struct{}{}
		go func() { defer func() { <-sem; wg.Done() }(); f() }()
	}
	for ci, c := range r.captures {
		for _, f := range r.filtersFor(c) {
			spawn(func() { r.captureJob(ctx, ci, f) })
		}
	}
	for _, f := range capgen.Classic {
		if r.wantClass(f.Class) {
			spawn(func() { r.agentsJob(ctx, f) })
		}
	}
	wg.Wait()
}

func (r *trial) wantClass(class string) bool {
	return r.classes == nil || slices.Contains(r.classes, class)
}

func (r *trial) filtersFor(c *capgen.Capture) []capgen.Filter {
	var fs []capgen.Filter
	for _, f := range append(slices.Clone(capgen.Classic), capgen.Random(c, r.seed, *flagFilters)...) {
		if r.wantClass(f.Class) {
			fs = append(fs, f)
		}
	}
	return fs
}

// captureJob: tcpdump on the capture's source file, then each mode's
// query of its agent.
func (r *trial) captureJob(ctx context.Context, ci int, f capgen.Filter) {
	c := r.captures[ci]
	want := r.tcpdump(ctx, ci, f.Expr).empty()
	r.mu.Lock()
	r.filters[f.Expr] = true
	r.mu.Unlock()
	differs := map[string]*diff{}
	for _, m := range r.modes {
		if m.all || !m.takes(f) {
			continue
		}
		got := r.query(ctx, m, c, f.Expr).empty()
		differs[m.name] = r.check(m, f, c.Link.Name, c.Name, r.expect(m, c, want), got)
	}
	// A difference through the index where reading the files whole gives
	// tcpdump's answer is the index's: it left out blocks it needed. One
	// with a small reorder window where the default one gives tcpdump's
	// answer is the window's.
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.modes {
		d := differs[m.name]
		if d == nil {
			continue
		}
		twin, kind := "", ""
		switch {
		case m.reorder != "":
			twin, kind = strings.TrimSuffix(m.name, "-reorder"+m.reorder), "differs with a small --reorder-mem only"
		case !m.noIndex:
			twin, kind = "no"+m.name, "differs through the index only"
		}
		if agrees, ran := differs[twin]; twin != "" && ran && agrees == nil {
			d.kind = kind
		}
	}
}

// agentsJob: the every-agent modes, against the captures' tcpdump
// results merged as the query promises (timestamp order, ties in the
// order of the agents' names, then of the agent's files).
func (r *trial) agentsJob(ctx context.Context, f capgen.Filter) {
	var ms []mode
	for _, m := range r.modes {
		if m.all && m.takes(f) {
			ms = append(ms, m)
		}
	}
	if len(ms) == 0 {
		return
	}
	wants := make([]result, len(r.captures))
	for ci := range r.captures {
		wants[ci] = r.tcpdump(ctx, ci, f.Expr).empty()
	}
	for _, m := range ms {
		// A filter libpcap refuses for some captures' link types but
		// takes for others selects the others' packets; refused by
		// all, the query is refused (docs/query.md).
		var want, refused result
		taken := false
		for ci, w := range wants {
			if w.refused {
				if !refused.refused {
					refused = result{refused: true, msg: r.captures[ci].Name + ": " + w.msg}
				}
				continue
			}
			taken = true
			want.pkts = append(want.pkts, r.expect(m, r.captures[ci], w).pkts...)
		}
		if !taken {
			want = refused
		}
		if !want.refused {
			names := func(p pkt) string { return r.captures[p.from].Name }
			slices.SortStableFunc(want.pkts, func(a, b pkt) int {
				if a.ts != b.ts {
					return cmpInt(a.ts, b.ts)
				}
				return strings.Compare(names(a), names(b))
			})
		}
		got := r.query(ctx, m, nil, f.Expr)
		if !want.refused && got.refused && strings.Contains(got.msg, "reorder window") {
			// Documented: an agent's disorder beyond its share of the
			// window stops the query. Taken as such only where the
			// agent's selected packets, in file order, need more than
			// half its share (its buffers and free lists may hold up
			// to twice what they carry).
			short, why := r.windowShort(m, wants, got.msg)
			if short {
				r.mu.Lock()
				r.windows++
				r.mu.Unlock()
				continue
			}
			got.msg += " (" + why + ")"
		}
		_ = r.check(m, f, "all", "every agent", want, got)
	}
}

// agentInMsg finds the agent a query's reorder-window error names.
var agentInMsg = regexp.MustCompile(`agent ([^ :]+): `)

// windowShort reports whether the agent the every-agent query's
// reorder-window refusal msg names needs a window of more than half its
// share of the default --reorder-mem, and why (or why not).
func (r *trial) windowShort(m mode, wants []result, msg string) (bool, string) {
	sub := agentInMsg.FindStringSubmatch(msg)
	if sub == nil {
		return false, "no agent named"
	}
	ci := slices.IndexFunc(r.captures, func(c *capgen.Capture) bool { return c.Name == sub[1] })
	if ci < 0 || wants[ci].refused {
		return false, "agent " + sub[1] + " is not a capture with packets"
	}
	since, until, ok := m.bounds(r.captures[0])
	var pkts []pkt // in file order, as the query's stream reads them
	for _, p := range wants[ci].pkts {
		if !ok || (p.ts >= since && p.ts < until) {
			pkts = append(pkts, p)
		}
	}
	need := windowNeed(pkts)
	share := max(int64(query.DefaultReorderMem)/int64(len(r.captures)), 256<<10)
	return 2*need > share, fmt.Sprintf("agent %s needs a window of %d KiB, its share is %d KiB", sub[1], need>>10, share>>10)
}

// windowNeed is the least window that puts pkts (in the order read)
// in timestamp order: the most that packets read before one and later
// than it ever hold, each counted as a query's stream holds it (its
// buffer, a power of two of at least 64 bytes, and a heap entry).
func windowNeed(pkts []pkt) int64 {
	cost := func(p pkt) int64 { return int64(1)<<max(bits.Len(uint(len(p.data)-1)), 6) + 64 }
	var need int64
	for i, p := range pkts {
		var held int64
		for _, q := range pkts[:i] {
			if q.ts > p.ts {
				held += cost(q)
			}
		}
		need = max(need, held+cost(p))
	}
	return need
}

func cmpInt(a, b int64) int { return int(min(max(a-b, -1), 1)) }

// expect is what the query in mode m must write given tcpdump's result
// on the source: the packets in the window, in timestamp order, ties in
// file order.
func (r *trial) expect(m mode, c *capgen.Capture, w result) result {
	if w.refused {
		return w
	}
	out := result{}
	if m.all {
		c = r.captures[0]
	}
	since, until, ok := m.bounds(c)
	for _, p := range w.pkts {
		if !ok || (p.ts >= since && p.ts < until) {
			out.pkts = append(out.pkts, p)
		}
	}
	slices.SortStableFunc(out.pkts, func(a, b pkt) int { return cmpInt(a.ts, b.ts) })
	return out
}

// tcpdump runs tcpdump -r on capture ci's source with the filter, with
// nanosecond timestamps.
func (r *trial) tcpdump(ctx context.Context, ci int, expr string) result {
	args := []string{"--time-stamp-precision=nano", "-r", r.source(r.captures[ci]), "-w", "-"}
	if expr != "" {
		args = append(args, expr)
	}
	res := r.exec(ctx, "tcpdump", args)
	for i := range res.pkts {
		res.pkts[i].from = ci
	}
	return res
}

// query runs pcapsync query in mode m, of capture c's agent (nil:
// every agent).
func (r *trial) query(ctx context.Context, m mode, c *capgen.Capture, expr string) result {
	args := []string{"query", "--dir", r.root(), "-w", "-"}
	if c != nil {
		args = append(args, "--agent", c.Name)
	}
	if m.noIndex {
		args = append(args, "--no-index")
	}
	if m.reorder != "" {
		args = append(args, "--reorder-mem", m.reorder)
	}
	if c == nil {
		c = r.captures[0]
	}
	if since, until, ok := m.bounds(c); ok {
		args = append(args, "--since", epoch(since), "--until", epoch(until))
	}
	if expr != "" {
		args = append(args, "--filter", expr)
	}
	r.mu.Lock()
	r.queries++
	r.mu.Unlock()
	return r.exec(ctx, pcapsyncBin, args)
}

// rejectsAll is libpcap's refusal of a filter whose optimized program
// accepts no packet ("host 10.0.0.1" on an IPv6-only link type). Such a
// filter selects nothing, and the test takes it so on both sides: a
// query over several link types must not refuse a filter that matches
// on some of them.
const rejectsAll = "expression rejects all packets"

func epoch(ns int64) string { return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9) }

// exec runs a program that writes a capture to stdout; a non-zero exit
// is a refusal, with the first line of stderr.
func (r *trial) exec(ctx context.Context, prog string, args []string) result {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		msg := fmt.Sprintf("%v: %s", err, lines[len(lines)-1])
		// libpcap's optimizer refuses a filter that can match nothing:
		// nothing selected.
		return result{refused: true, msg: msg, rejectsAll: strings.Contains(stderr.String(), rejectsAll)}
	}
	pkts, err := readPkts(stdout.Bytes())
	if err != nil {
		return result{refused: true, msg: fmt.Sprintf("reading the output of %s: %v", filepath.Base(prog), err)}
	}
	return result{pkts: pkts, raw: stdout.Bytes()}
}

func readPkts(b []byte) ([]pkt, error) {
	rd, err := pcapfile.NewReader(bytes.NewReader(b), nil)
	if err != nil {
		return nil, err
	}
	var out []pkt
	for {
		p, err := rd.ReadPacket()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, pkt{ts: p.Timestamp, orig: p.OrigLen, data: p.Data})
	}
}

// check compares a query's result with the expected one and records a
// difference, which it returns (nil: none).
func (r *trial) check(m mode, f capgen.Filter, link, capture string, want, got result) *diff {
	d := diff{class: f.Class, link: link, mode: m.name, capture: capture, filter: f.Expr}
	switch {
	case want.refused && got.refused:
		return nil
	case !want.refused && got.refused && strings.Contains(got.msg, "reorder window") && m.reorder != "":
		r.mu.Lock()
		r.windows++ // documented: disorder beyond --reorder-mem stops the query
		r.mu.Unlock()
		return nil
	case want.refused:
		d.kind, d.detail = "query accepts what tcpdump refuses", fmt.Sprintf("tcpdump: %s; query wrote %d packets", want.msg, len(got.pkts))
	case got.refused:
		d.kind, d.detail = "query refuses what tcpdump accepts", fmt.Sprintf("query: %s; tcpdump selects %d packets", got.msg, len(want.pkts))
	default:
		detail := packetDiff(want.pkts, got.pkts)
		if detail == "" {
			return nil
		}
		d.kind, d.detail = "packets differ", detail
		if len(got.pkts) < len(want.pkts) {
			d.kind = "query selects fewer"
		} else if len(got.pkts) > len(want.pkts) {
			d.kind = "query selects more"
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	pd := &d
	r.diffs = append(r.diffs, pd)
	if *flagKeep != "" {
		dir := filepath.Join(r.work, "diffs")
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%05d-query.pcapng", len(r.diffs))), got.raw, 0o644)
	}
	return pd
}

// packetDiff describes how got differs from want, "" when it does not:
// the counts, the packets missing and extra (as multisets), and the
// first position that differs.
func packetDiff(want, got []pkt) string {
	first := -1
	for i := range max(len(want), len(got)) {
		if i >= len(want) || i >= len(got) || !samePkt(want[i], got[i]) {
			first = i
			break
		}
	}
	if first < 0 {
		return ""
	}
	count := map[string]int{}
	for _, p := range want {
		count[key(p)]++
	}
	extra := 0
	for _, p := range got {
		if count[key(p)] > 0 {
			count[key(p)]--
		} else {
			extra++
		}
	}
	missing := 0
	for _, n := range count {
		missing += n
	}
	s := fmt.Sprintf("query %d packets, tcpdump %d (missing %d, extra %d); first difference at packet %d:", len(got), len(want), missing, extra, first)
	if first < len(got) {
		s += " query " + describe(got[first])
	} else {
		s += " query has no more"
	}
	if first < len(want) {
		s += "; tcpdump " + describe(want[first])
	} else {
		s += "; tcpdump has no more"
	}
	return s
}

func samePkt(a, b pkt) bool { return a.ts == b.ts && a.orig == b.orig && bytes.Equal(a.data, b.data) }

func key(p pkt) string { return fmt.Sprintf("%d/%d/%x", p.ts, p.orig, p.data) }

func describe(p pkt) string {
	h := p.data[:min(len(p.data), 48)]
	return fmt.Sprintf("ts %s orig %d caplen %d bytes %x", epoch(p.ts), p.orig, len(p.data), h)
}

func (d diff) String() string {
	return fmt.Sprintf("%s | %s | %s | capture %s | filter %q | %s", d.kind, d.mode, d.class, d.capture, d.filter, d.detail)
}

// TestWindowNeed: in order, a packet's own cost; late packets after
// early ones, every early one held until the late ones are read.
func TestWindowNeed(t *testing.T) {
	p := func(ts int64, n int) pkt { return pkt{ts: ts, data: make([]byte, n)} }
	for _, c := range []struct {
		name string
		pkts []pkt
		want int64
	}{
		{"in order", []pkt{p(1, 100), p(2, 100), p(3, 100)}, 128 + 64},
		{"one back", []pkt{p(1, 100), p(3, 100), p(2, 100)}, 2 * (128 + 64)},
		{"reversed", []pkt{p(3, 1000), p(2, 10), p(1, 100)}, 1024 + 64 + 64 + 64 + 128 + 64},
		{"ties wait for nothing", []pkt{p(2, 100), p(2, 100), p(2, 100)}, 128 + 64},
	} {
		if got := windowNeed(c.pkts); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
