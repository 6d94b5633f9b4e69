package query

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
)

// AgentCoverage is what a query had to answer from for one selected
// agent: the data the root keeps of it, what retention removed inside
// the query's range, and the files the query could not use.
type AgentCoverage struct {
	Agent string `json:"agent"`
	// Oldest and Newest are the agent's oldest and newest packet kept
	// in the root, whatever the query's range: its retention window, as
	// far as known (TimesUnknown). Zero (omitted) when it keeps none
	// known.
	Oldest time.Time `json:"oldest,omitzero"`
	Newest time.Time `json:"newest,omitzero"`
	// Files counts the agent's data files listed; TimesUnknown those
	// whose times are not known: not in retention's index, without an
	// index of their own, and not read by the query.
	Files        int `json:"files"`
	TimesUnknown int `json:"times_unknown,omitempty"`
	// Overlaps: the data kept overlaps the query's range [Since,
	// Until), or may (TimesUnknown), or the query wrote packets of it.
	Overlaps bool `json:"overlaps"`
	// Removed is what retention removed of the agent's files, set when
	// it reaches into the query's range: packets of the range may be
	// gone.
	Removed *Removal `json:"removed,omitempty"`
	// Unusable names up to MaxUnusable files the query could not use,
	// UnusableTotal counts them all.
	Unusable      []UnusableFile `json:"unusable,omitempty"`
	UnusableTotal int            `json:"unusable_total,omitempty"`
}

// Removal is retention's record of an agent's files it removed
// (layout.Removed): how many, their bytes, and the oldest and newest
// packet among them.
type Removal struct {
	Files   int64     `json:"files"`
	Bytes   int64     `json:"bytes"`
	From    time.Time `json:"from"`
	Through time.Time `json:"through"`
}

// UnusableFile is a file of an agent the query could not use, and why:
// Name is a name in the agent's directory, or a path relative to the
// root (retention's index, .pcapsync-retain/AGENT.json).
type UnusableFile struct {
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

// MaxUnusable bounds the files AgentCoverage.Unusable names.
const MaxUnusable = 8

// Covered reports whether the query had anything to answer from: it
// wrote packets, or at least one selected agent keeps data overlapping
// its range (and, with interface patterns, one of them matched an
// interface). False for a selection that matches no agent, interface
// patterns that match none of the interfaces with packets in the
// range, or a range outside every selected agent's kept data: an empty
// answer then says nothing about the traffic, where an empty answer of
// a covered query does. A Result without coverage (Coverage nil: one
// decoded from a server that predates it) is taken as covered: nothing
// says otherwise. Run's and Each's Results always have it, empty when
// no agent is selected.
func (r Result) Covered() bool {
	if r.Packets > 0 || r.Coverage == nil {
		return true
	}
	if r.IfacesUnmatched {
		return false
	}
	return slices.ContainsFunc(r.Coverage, func(c AgentCoverage) bool { return c.Overlaps })
}

// Uncovered is why the query cfg, which gave r, had nothing to answer
// from (r.Covered() false), for people: the agents or interfaces there
// are, or each selected agent's kept range. "" when r is Covered.
func Uncovered(cfg Config, r Result) string {
	if r.Covered() {
		return ""
	}
	var b strings.Builder
	b.WriteString("nothing to answer from: ")
	switch {
	case len(r.Coverage) == 0:
		root := cfg.Dir
		if root == "" {
			root = "the server's root"
		}
		fmt.Fprintf(&b, "no agent of %s matches", root)
		if len(cfg.Agents) > 0 {
			fmt.Fprintf(&b, " --agent %s", logList(cfg.Agents))
		}
		if len(cfg.Ifaces) > 0 {
			fmt.Fprintf(&b, " --iface %s", logList(cfg.Ifaces))
		}
		if r.AgentsUnselected != "" {
			fmt.Fprintf(&b, "; agents there: %s", r.AgentsUnselected)
		} else {
			b.WriteString("; it holds no agent")
		}
	case r.IfacesUnmatched:
		fmt.Fprintf(&b, "no interface with packets in the range matches --iface %s; interfaces there: %s",
			logList(cfg.Ifaces), r.Unselected)
	default:
		b.WriteString("the range")
		if since, until := cfg.bounds(); since != math.MinInt64 || until != math.MaxInt64 {
			b.WriteString(" " + rangeText(since, until))
		}
		fmt.Fprintf(&b, " is outside the data kept of every agent selected: %s", coverageText(r.Coverage, "; "))
	}
	return b.String()
}

// rangeText is [since, until) in words.
func rangeText(since, until int64) string {
	s, u := "the beginning", "the end"
	if since > math.MinInt64 {
		s = fmtTime(since)
	}
	if until < math.MaxInt64 {
		u = fmtTime(until)
	}
	return "[" + s + ", " + u + ")"
}

func fmtTime(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// coverageText is the coverage of each agent in words (String),
// joined by sep.
func coverageText(cs []AgentCoverage, sep string) string {
	var parts []string
	for _, c := range cs {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, sep)
}

// String is c on one line, for people: "web1 keeps A to B; retention
// removed packets from X through Y (N files, B bytes); ...".
func (c AgentCoverage) String() string {
	var b strings.Builder
	b.WriteString(c.Agent)
	switch {
	case !c.Oldest.IsZero():
		fmt.Fprintf(&b, " keeps %s to %s", c.Oldest.UTC().Format(time.RFC3339Nano), c.Newest.UTC().Format(time.RFC3339Nano))
	case c.TimesUnknown == 0:
		b.WriteString(" keeps no packet")
	default:
		b.WriteString(" keeps packets at times unknown")
	}
	if c.TimesUnknown > 0 {
		fmt.Fprintf(&b, " (times of %d of %d files unknown)", c.TimesUnknown, c.Files)
	}
	if r := c.Removed; r != nil {
		fmt.Fprintf(&b, "; retention removed packets from %s through %s (%d files, %d bytes)",
			r.From.UTC().Format(time.RFC3339Nano), r.Through.UTC().Format(time.RFC3339Nano), r.Files, r.Bytes)
	}
	if c.UnusableTotal > 0 {
		var names []string
		for _, u := range c.Unusable {
			names = append(names, u.Name+": "+u.Reason)
		}
		fmt.Fprintf(&b, "; %d files not used (%s", c.UnusableTotal, strings.Join(names, ", "))
		if c.UnusableTotal > len(c.Unusable) {
			fmt.Fprintf(&b, ", %d more", c.UnusableTotal-len(c.Unusable))
		}
		b.WriteString(")")
	}
	return b.String()
}

// covAcc gathers a stream's coverage as the query goes.
type covAcc struct {
	kept     layout.TimeRange // of the files whose times are known so far
	removed  layout.Removed   // retention's record
	listed   int              // data files listed
	later    []layout.FileInfo
	unusable []UnusableFile
	total    int
	// indexed: the times found in the own index of files without
	// times in retention's (indexTimes), by path; ok false when none.
	indexed map[string]idxTimes
}

type idxTimes struct {
	t  layout.TimeRange
	ok bool
}

// note records the file name (in the agent's directory, or relative
// to the root) as not usable, for reason.
func (c *covAcc) note(name string, reason error) {
	c.total++
	if len(c.unusable) < MaxUnusable {
		c.unusable = append(c.unusable, UnusableFile{Name: name, Reason: reason.Error()})
	}
}

// coverage is the stream's coverage. With final, the times of the
// files still unknown are looked for in the own index of the first and
// the last of them (read whole, as a query reads it; the data file is
// not read), the files between taken to lie between; else they count
// as unknown.
func (s *stream) coverage(final bool) AgentCoverage {
	c := AgentCoverage{Agent: s.agent, Files: s.cov.listed,
		Unusable: slices.Clone(s.cov.unusable), UnusableTotal: s.cov.total}
	kept := s.cov.kept
	var unknown []layout.FileInfo // in write order
	for _, fi := range slices.Concat(s.cov.later, s.files[min(s.next, len(s.files)):]) {
		if fi.Times {
			kept.Add(fi.First)
			kept.Add(fi.Last)
		} else {
			unknown = append(unknown, fi)
		}
	}
	c.TimesUnknown = len(unknown)
	if n := len(unknown); final && n > 0 {
		// The first and the last of them, by their own index: the
		// files between were written between (in time order, but for
		// the reorder the store allows), so they are taken to lie
		// between and no other index is read.
		first := s.indexTimes(unknown[0], &kept)
		last := n == 1 && first || n > 1 && s.indexTimes(unknown[n-1], &kept)
		switch {
		case first && last:
			c.TimesUnknown = 0
		case first || last:
			c.TimesUnknown = n - 1
		}
	}
	if s.cur != nil && !s.curKnown {
		// The file being read: what was read of it so far is in kept.
		c.TimesUnknown++
	}
	if kept.OK {
		c.Oldest, c.Newest = time.Unix(0, kept.Min).UTC(), time.Unix(0, kept.Max).UTC()
	}
	q := s.q
	c.Overlaps = kept.OK && kept.Min < q.until && kept.Max >= q.since || c.TimesUnknown > 0 || s.out
	if r := s.cov.removed; r.Files > 0 && r.Through >= q.since && r.From < q.until {
		c.Removed = &Removal{Files: r.Files, Bytes: r.Bytes, From: time.Unix(0, r.From).UTC(), Through: time.Unix(0, r.Through).UTC()}
	}
	return c
}

// indexTimes adds to t the times of the packets of the data file fi
// that its own index (sidecar) lists, read once per query; false when
// it has none usable.
func (s *stream) indexTimes(fi layout.FileInfo, t *layout.TimeRange) bool {
	it, seen := s.cov.indexed[fi.Path]
	if !seen && !s.q.cfg.NoIndex {
		ix, err := index.Open(fi.Path)
		if st, serr := os.Lstat(index.Path(fi.Path)); serr == nil && st.Mode().IsRegular() {
			s.res.BytesRead += st.Size() // read whole by Open
		}
		if err == nil {
			s.res.BytesRead += ix.Probed
			if ix.Final || len(ix.All) > 0 {
				blockTimes(ix, &it.t)
				it.ok = true
			}
		}
		if s.cov.indexed == nil {
			s.cov.indexed = map[string]idxTimes{}
		}
		s.cov.indexed[fi.Path] = it
	}
	if it.ok && it.t.OK {
		t.Add(it.t.Min)
		t.Add(it.t.Max)
	}
	return it.ok
}

// blockTimes adds to t the times of ix's blocks that hold packets.
func blockTimes(ix *index.Index, t *layout.TimeRange) {
	for _, b := range ix.All {
		if b.Packets > 0 {
			t.Add(b.First)
			t.Add(b.Last)
		}
	}
}

// coverage is every selected agent's coverage (stream.coverage).
func (q *query) coverage(final bool) []AgentCoverage {
	out := make([]AgentCoverage, 0, len(q.all))
	for _, s := range q.all {
		out = append(out, s.coverage(final))
	}
	return out
}

// finish completes the Result: the coverage, and whether interface
// patterns matched nothing with packets in the range while other
// interfaces had some.
func (q *query) finish() {
	q.res.Coverage = q.coverage(true)
	q.res.IfacesUnmatched = len(q.cfg.Ifaces) > 0 && q.res.Interfaces == 0 && q.res.Unselected != ""
}

// errFile is the reason a file is not usable as a query error gives it:
// the error without the path it names.
func errFile(path string, err error) error {
	msg := strings.ReplaceAll(err.Error(), path+": ", "")
	return errors.New(strings.ReplaceAll(msg, path, filepath.Base(path)))
}

// errNotRegular: an entry named as a data file that is a link, a FIFO
// or another file that is not regular: never opened.
var errNotRegular = errors.New("not a regular file: not read")

// maxIfaceComment bounds an interface's comment: its agent's coverage.
const maxIfaceComment = 1 << 10

// ifaceComment is the comment of an interface of the output: its
// agent's coverage (AgentCoverage.String), at most maxIfaceComment
// bytes of valid UTF-8.
func ifaceComment(c AgentCoverage) string {
	s := "covered: " + c.String()
	if len(s) <= maxIfaceComment {
		return s
	}
	return strings.ToValidUTF8(s[:maxIfaceComment-4], "") + " ..."
}

// maxCoverageComment bounds the coverage lines of the section's
// comment; with maxDescribe, the comment stays well within a pcapng
// option's 65535 bytes.
const maxCoverageComment = 16 << 10

// sectionComment is the output's section comment: the query in words
// (describe), then a line per selected agent with its coverage as known
// before the first packet ("coverage: " and AgentCoverage.String), or
// a line saying no agent is selected; the coverage lines cut at
// maxCoverageComment bytes, the cut said.
func (q *query) sectionComment() string {
	var b strings.Builder
	cs := q.coverage(true)
	if len(cs) == 0 {
		b.WriteString("\ncoverage: no agent selected")
	}
	for i, c := range cs {
		line := "\ncoverage: " + c.String()
		if b.Len()+len(line) > maxCoverageComment {
			fmt.Fprintf(&b, "\ncoverage of %d more agents left out", len(cs)-i)
			break
		}
		b.WriteString(line)
	}
	return q.describe() + b.String()
}
