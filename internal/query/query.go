package query

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// Result is what a query did.
type Result struct {
	Packets      int64 `json:"packets"`       // written
	Bytes        int64 `json:"bytes"`         // of pcapng written
	Agents       int   `json:"agents"`        // selected
	FilesRead    int   `json:"files_read"`    // opened
	FilesSkipped int   `json:"files_skipped"` // outside the range by the retention index's times
	// Stopped is "count" or "max-bytes" when a limit ended the query,
	// "interrupted" when its context ended a follow; else "".
	Stopped string `json:"stopped"`
	// Late counts the packets written after one with a later timestamp:
	// in follow mode, packets of an agent that came more than
	// FollowDelay after the others' (never without Follow).
	Late int64 `json:"late"`
	// What was read: BytesRead counts the bytes read from the data
	// files (at the file, under any decompressor, read-ahead included)
	// and the whole of every index file opened. Of the files read,
	// FilesIndexed were read through their index and FilesScanned whole
	// (no index, or one not usable: missing, damaged, stale, of an
	// unknown version); BlocksRead and BlocksSkipped are the index
	// blocks of the former read and not read.
	BytesRead     int64 `json:"bytes_read"`
	FilesIndexed  int   `json:"files_indexed"`
	FilesScanned  int   `json:"files_scanned"`
	BlocksRead    int64 `json:"blocks_read"`
	BlocksSkipped int64 `json:"blocks_skipped"`
	// FilterRefused counts the interfaces of the output whose link type
	// libpcap refuses the filter for ("inbound" on Ethernet): none of
	// their packets pass, where tcpdump -r on their file would refuse
	// to run.
	FilterRefused int `json:"filter_refused"`
	// Interfaces counts the interfaces the selection (Ifaces) took of
	// the files read; Unselected names up to MaxUnselected others met
	// there, comma-separated in the order met: with Ifaces given and
	// Interfaces 0, what the patterns might have meant.
	Interfaces int    `json:"interfaces"`
	Unselected string `json:"ifaces_unselected,omitempty"`
	// IfacesUnmatched: interface patterns were given and matched none
	// of the interfaces with packets in the range, while others
	// (Unselected) had some: the query had nothing to answer from.
	IfacesUnmatched bool `json:"ifaces_unmatched,omitempty"`
	// AgentsUnselected names up to MaxUnselected agents of the root
	// that the selection left out, comma-separated by name.
	AgentsUnselected string `json:"agents_unselected,omitempty"`
	// Coverage is what each selected agent had to answer from, by
	// agent name (coverage.go); Covered sums it up.
	Coverage []AgentCoverage `json:"coverage"`
}

// MaxUnselected bounds the names in Result.Unselected.
const MaxUnselected = 8

// noteUnselected adds name to r.Unselected unless it is there or full.
func (r *Result) noteUnselected(name string) {
	if r.Unselected == "" {
		r.Unselected = name
		return
	}
	names := strings.Split(r.Unselected, ",")
	if len(names) < MaxUnselected && !slices.Contains(names, name) {
		r.Unselected += "," + name
	}
}

// Packet is a packet a query selects, as Prepared.Each gives it.
type Packet struct {
	// Agent is the name of the agent whose files hold the packet.
	Agent string
	// Iface numbers the query's interfaces from 0 in the order their
	// first packets come; Interface describes it, its Name "agent:if"
	// (as the files name it; "agent:" for an interface without a
	// name). The same Iface is the same interface throughout a query.
	Iface     int
	Interface *pcapfile.Interface
	// Timestamp is Unix time in nanoseconds; OrigLen the length on the
	// wire; Data the captured bytes, valid until the call returns.
	Timestamp int64
	OrigLen   uint32
	Data      []byte
}

// outIface is an interface of the output: one per name, link type and
// snaplen found in the files.
type outIface struct {
	ifc      pcapfile.Interface
	w        int  // index in the writer (or of Each's Iface); -1 until its first packet
	compiled bool // the filter, for its link type
}

type stats struct {
	out int
	st  pcapfile.InterfaceStats
}

type query struct {
	cfg          Config
	since, until int64
	filter       *filter.Filter
	cid          communityID
	sel          *selection
	outs         []*outIface // appended under mu (producers add to it)
	mouts        []*outIface // the merge's copy of outs (outAt)
	mu           sync.Mutex
	stats        []stats
	w            *pcapfile.NgWriter // nil for Each
	bw           flusher
	sem          chan struct{}       // read-ahead's tokens; nil: no read-ahead (Config.Threads 1)
	each         func(*Packet) error // Each's; nil for Run
	tee          func(*Packet) error // RunEach's: given each packet written
	pk           Packet              // what each is given
	ifaces       int                 // Each's interfaces so far
	res          Result
	lastTS       int64 // of the last packet written

	// Follow mode (follow.go).
	all         []*stream // every agent's stream, by name
	delay, poll time.Duration
	now         time.Time // of the current round
	round       uint64
	rounds      []round // rounds still holding packets, from roundBase on
	roundBase   uint64
}

// Prepared is a query ready to run: its Config valid, its filter
// compiled (for Ethernet; for another link type when its first packet
// comes). Run it once.
type Prepared struct {
	cfg    Config
	filter *filter.Filter
}

// Prepare validates cfg and compiles its filter, once for the query:
// a filter that does not compile is an error wrapping ErrBadFilter. A
// filter libpcap refuses for every link type pcapsync meets is refused
// with its message for the first link type of the files selected
// (libpcap's reasons differ per link type), Ethernet's when none is;
// a link type of the files beyond those that takes it runs it.
// ctx ends the compile's wait (libpcap compiles one filter at a time
// in the process, capture.CompileFilterContext): the error then wraps
// the context's.
func Prepare(ctx context.Context, cfg Config) (*Prepared, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f, err := filter.NewContext(ctx, cfg.Filter)
	if errors.Is(err, capture.ErrBadFilter) && !errors.Is(err, capture.ErrFilterLimit) {
		// Refused for every link type pcapsync meets: for those of the
		// files selected, with libpcap's message for one of them (a
		// link type beyond those may take it).
		if lts := selectionLinkTypes(ctx, cfg); len(lts) > 0 {
			f, err = filter.NewFor(ctx, cfg.Filter, lts)
		}
	}
	switch {
	case errors.Is(err, capture.ErrBadFilter) || errors.Is(err, capture.ErrFilterLimit):
		return nil, &filterError{err}
	case err != nil:
		return nil, fmt.Errorf("filter: %w", err)
	}
	return &Prepared{cfg: cfg, filter: f}, nil
}

// Run prepares the query cfg (Prepare) and runs it (Prepared.Run).
func Run(ctx context.Context, cfg Config, w io.Writer) (Result, error) {
	p, err := Prepare(ctx, cfg)
	if err != nil {
		return Result{}, err
	}
	return p.Run(ctx, w)
}

// Run runs the query over the files below its Dir and writes the
// packets it selects to w as one pcapng section: packets of every agent
// merged in timestamp order (ties: by agent name, then in file order),
// one interface description block per agent interface as named in the
// files ("web1:eth0"), written before its first packet, with nanosecond
// timestamps, captured and original lengths as in the files; after the
// packets, the interface statistics blocks of the files read, in time
// order. Memory is bounded by Config.ReorderMem plus a reader per
// selected agent, whatever the size of the result (doc.go).
//
// An error after writing began (ErrFileGone, ErrOutOfOrder, a read
// error) still leaves w holding a valid pcapng stream of what was
// written, flushed; the Result says how much.
func (p *Prepared) Run(ctx context.Context, w io.Writer) (Result, error) {
	return p.RunEach(ctx, w, nil)
}

// RunEach runs the query as Run does, writing the pcapng to w, and
// calls fn (if not nil) with each packet once it is written to the
// output's buffer, in the output's order, Packet.Iface the packet's
// interface in the pcapng: what `pcapsync query --print` prints (and,
// with w discarding, its lines without -w), without reading the
// pcapng back. An error from fn stops the query and is returned as
// is; Packet.Data is reused once fn returns.
func (p *Prepared) RunEach(ctx context.Context, w io.Writer, fn func(*Packet) error) (Result, error) {
	return p.do(ctx, func(q *query) error {
		q.tee = fn
		var bw flusher = bufio.NewWriterSize(w, outBuf)
		if q.sem != nil {
			aw := newAsyncWriter(w)
			defer aw.Close()
			bw = aw
		}
		q.bw = bw
		var err error
		q.w, err = pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{
			OS:       "Linux",
			UserAppl: "pcapsync query",
			Comment:  q.sectionComment(),
		})
		if err != nil {
			return err
		}
		err = q.run(ctx)
		if err == nil {
			err = q.writeStats()
		}
		q.res.Bytes = q.w.Written()
		if ferr := bw.Flush(); err == nil && ferr != nil {
			err = fmt.Errorf("writing the output: %w", ferr)
		}
		return err
	})
}

// Each runs the query as Run does and calls fn with each packet Run
// would write, in the same order, instead of writing them: the packets
// of every agent selected, merged in timestamp order (ties by agent
// name, then in file order). An error from fn stops the query and is
// returned as is. Count stops it as in Run; MaxBytes, a bound on
// output bytes, does not apply (Result.Bytes stays 0); the files'
// statistics are not given. Follow runs until ctx ends, as in Run.
// Memory is Run's (doc.go) plus what fn keeps: Packet.Data is reused
// once fn returns.
func (p *Prepared) Each(ctx context.Context, fn func(*Packet) error) (Result, error) {
	return p.do(ctx, func(q *query) error {
		q.each = fn
		return q.run(ctx)
	})
}

// do starts the query, runs body on it and closes it.
func (p *Prepared) do(ctx context.Context, body func(*query) error) (Result, error) {
	q, err := p.start(ctx)
	if q == nil {
		return Result{}, err
	}
	defer q.close()
	if err == nil {
		err = body(q)
	}
	q.finish()
	return q.res, err
}

// start lists the query's agents and files and refuses its filter if
// no link type of theirs takes it; nil if the listing failed. Close
// what it returns.
func (p *Prepared) start(ctx context.Context) (*query, error) {
	cfg := p.cfg
	q := &query{cfg: cfg, filter: p.filter, cid: communityID(cfg.CommunityID)}
	q.since, q.until = cfg.bounds()
	q.sel = newSelection(q.since, q.until, cfg.Filter, cfg.NoIndex, cfg.Blocks)
	q.delay, q.poll = cfg.followTimes()
	q.now = time.Now()
	if n := cfg.threads(); n > 1 {
		q.sem = make(chan struct{}, n)
	}
	streams, err := q.streams()
	if err != nil {
		return nil, err
	}
	q.all = streams
	return q, q.refuseFilter(ctx)
}

// run merges the streams, following them if the query follows.
func (q *query) run(ctx context.Context) error {
	if q.cfg.Follow {
		return q.follow(ctx)
	}
	if q.sem != nil {
		return q.mergeProduced(ctx, q.all)
	}
	return q.merge(ctx, q.all)
}

// close closes every stream's file.
func (q *query) close() {
	for _, s := range q.all {
		s.close()
	}
}

// streams selects the agents and their files.
func (q *query) streams() ([]*stream, error) {
	agents, err := layout.Agents(q.cfg.Dir) // Validate checked it is a directory
	if err != nil {
		return nil, fmt.Errorf("output root: %w", err)
	}
	var names, others []string
	for _, name := range agents { // sorted by name
		switch {
		case q.agentSelected(name):
			names = append(names, name)
		case len(others) < MaxUnselected:
			others = append(others, name)
		}
	}
	q.res.AgentsUnselected = strings.Join(others, ",")
	limit := q.streamLimit(len(names))
	var out []*stream
	warned := q.cfg.Logger == nil
	for _, name := range names {
		l, err := layout.ListAgent(q.cfg.Dir, name)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed since the listing: it has nothing
		}
		if err != nil {
			return nil, err
		}
		files := l.Files
		if !warned {
			if err := layout.RetainIndexReadable(q.cfg.Dir, name); err != nil {
				q.cfg.Logger.Warn("query: retention's index of file times cannot be read: files are opened for their times instead (slower)",
					"agent", name, "err", err, "hint", "make "+filepath.Join(q.cfg.Dir, layout.RetainDir, "*.json")+" readable to this user (docs/query.md)")
				warned = true
			}
		}
		s := newStream(q, name, len(out), files, limit)
		s.lastRead = q.now
		s.cov.removed = l.Removed
		for _, n := range l.NotRegular {
			s.cov.note(n, errNotRegular)
		}
		if l.IndexErr != nil {
			s.cov.note(filepath.Join(layout.RetainDir, name+".json"), fmt.Errorf("retention's index of file times: %w", l.IndexErr))
		}
		out = append(out, s)
	}
	q.res.Agents = len(out)
	if len(out) == 0 && q.cfg.Logger != nil && !q.cfg.Follow {
		q.cfg.Logger.Warn("query: no agent directory matches", "dir", q.cfg.Dir, "agents", logList(q.cfg.Agents), "ifaces", logList(q.cfg.Ifaces))
	}
	return out, nil
}

// logList is patterns for a log line: the first ones up to 1 KiB,
// then how many there are.
func logList(patterns []string) string {
	s := strings.Join(patterns, ",")
	if len(s) <= 1<<10 {
		return s
	}
	return strings.ToValidUTF8(s[:1<<10], "") + fmt.Sprintf("... (%d patterns)", len(patterns))
}

// streamLimit is the reorder window of each of n streams.
func (q *query) streamLimit(n int) int64 {
	limit := q.cfg.ReorderMem
	if limit == 0 {
		limit = DefaultReorderMem
	}
	return max(limit/int64(max(n, 1)), minStreamMem)
}

// agentSelected: name matches an agent pattern (or there are none) and
// an interface pattern can match one of its interfaces.
func (q *query) agentSelected(name string) bool {
	if len(q.cfg.Agents) > 0 && !slices.ContainsFunc(q.cfg.Agents, func(p string) bool { ok, _ := path.Match(p, name); return ok }) {
		return false
	}
	if len(q.cfg.Ifaces) == 0 {
		return true
	}
	return slices.ContainsFunc(q.cfg.Ifaces, func(p string) bool {
		a, _, has := strings.Cut(p, ":")
		ok, _ := path.Match(a, name)
		return !has || ok
	})
}

// ifaceSelected: an interface named full ("agent:if") matches.
func (q *query) ifaceSelected(full string) bool {
	return layout.MatchIface(q.cfg.Ifaces, full)
}

// output returns the index in q.outs of ifc, an interface of the files
// of s's agent, adding it; -1 if the query does not select it. It is
// named as layout.IfaceName says (a file's interface without the
// agent's prefix gets it). An interface Run
// writes carries its agent's coverage as known now as its comment
// (ifaceComment).
func (q *query) output(s *stream, ifc pcapfile.Interface) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	ifc.Name = layout.IfaceName(s.agent, ifc.Name)
	if !q.ifaceSelected(ifc.Name) {
		if s.prod != nil { // in the order the merge alone would meet it
			s.prod.cur.evs = append(s.prod.cur.evs, event{after: s.pops, unselected: ifc.Name})
		} else {
			q.res.noteUnselected(ifc.Name)
		}
		return -1
	}
	for i, o := range q.outs {
		if o.ifc.Name == ifc.Name && o.ifc.LinkType == ifc.LinkType && o.ifc.SnapLen == ifc.SnapLen {
			return i
		}
	}
	ifc.Comment = ""
	if q.w != nil {
		ifc.Comment = ifaceComment(s.coverage(true))
	}
	q.outs = append(q.outs, &outIface{ifc: ifc, w: -1})
	q.res.Interfaces = len(q.outs)
	return len(q.outs) - 1
}

// outAt is q.outs[i] for the merge, which reads q.outs without
// holding mu but when it meets an index beyond its copy.
func (q *query) outAt(i int) *outIface {
	if i >= len(q.mouts) {
		q.mu.Lock()
		q.mouts = q.outs
		q.mu.Unlock()
	}
	return q.mouts[i]
}

// compile compiles the filter for the link type of q.outs[out] unless
// it was: the filter's one compile per link type. A filter libpcap
// refuses for this link type ("inbound" on Ethernet) passes none of
// its packets, as tcpdump -r would print none of them; Prepare made
// sure it compiles for some.
func (q *query) compile(ctx context.Context, out int) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	o := q.outs[out]
	if o.compiled {
		return nil
	}
	if err := q.filter.Compile(ctx, o.ifc.LinkType); err != nil {
		if !errors.Is(err, capture.ErrBadFilter) {
			return fmt.Errorf("filter for interface %s: %w", o.ifc.Name, err)
		}
		q.res.FilterRefused++
	}
	o.compiled = true
	return nil
}

// writeHead writes the oldest packet of s, the stream at the top of
// the merge, and releases its bytes; more is false once a limit
// (Count, MaxBytes) ends the output.
func (q *query) writeHead(s *stream) (more bool, err error) {
	if q.cfg.Count > 0 && q.res.Packets >= q.cfg.Count {
		q.res.Stopped = "count"
		return false, nil
	}
	p := s.pop()
	ok, err := q.writePacket(s.agent, &p)
	s.release(&p)
	return ok && err == nil, err
}

// mergeEnt is a stream in the merge's heap with its head's timestamp,
// so that ordering the heap reads no stream.
type mergeEnt struct {
	ts   int64
	rank int
	s    *stream
}

// merge writes the streams' packets in timestamp order until they end
// or a limit is reached.
func (q *query) merge(ctx context.Context, streams []*stream) error {
	h := minHeap[mergeEnt]{less: func(a, b mergeEnt) bool {
		return a.ts < b.ts || a.ts == b.ts && a.rank < b.rank
	}}
	for _, s := range streams {
		if err := s.fill(ctx); err != nil {
			return err
		}
		if !s.empty() {
			h.push(mergeEnt{ts: s.head().ts, rank: s.rank, s: s})
		}
	}
	for h.len() > 0 {
		s := h.s[0].s
		more, err := q.writeHead(s)
		if err != nil || !more {
			return err
		}
		if err := s.fill(ctx); err != nil {
			return err
		}
		if s.empty() {
			h.pop()
		} else {
			h.s[0].ts = s.head().ts
			h.fix()
		}
	}
	return ctx.Err()
}

// writePacket writes p, of agent, and its interface's block if it is
// the first packet on it (or gives it to Each's function); false when
// --max-bytes stops the query first.
func (q *query) writePacket(agent string, p *pkt) (bool, error) {
	o := q.outAt(p.out)
	if q.each != nil {
		return true, q.give(agent, o, p)
	}
	need := pcapfile.EPBSize(len(p.data))
	if o.w < 0 {
		need += pcapfile.InterfaceSize(o.ifc)
	}
	if q.cfg.MaxBytes > 0 && q.w.Written()+need > q.cfg.MaxBytes {
		q.res.Stopped = "max-bytes"
		return false, nil
	}
	if err := q.ensure(o); err != nil {
		return false, err
	}
	if err := q.w.WritePacket(o.w, p.ts, p.orig, p.data); err != nil {
		return false, err
	}
	q.count(p)
	if q.tee != nil {
		q.setPacket(agent, o, p)
		if err := q.tee(&q.pk); err != nil {
			return false, err
		}
	}
	return true, nil
}

// give calls Each's function with p, of agent.
func (q *query) give(agent string, o *outIface, p *pkt) error {
	if o.w < 0 {
		o.w = q.ifaces
		q.ifaces++
	}
	q.setPacket(agent, o, p)
	if err := q.each(&q.pk); err != nil {
		return err
	}
	q.count(p)
	return nil
}

// setPacket sets q.pk to p, of agent, on o: field by field, as a
// composite literal is built on the stack and copied in 16-byte moves
// that stall on the stores just made (perf).
func (q *query) setPacket(agent string, o *outIface, p *pkt) {
	k := &q.pk
	k.Agent, k.Iface, k.Interface, k.Timestamp, k.OrigLen, k.Data = agent, o.w, &o.ifc, p.ts, p.orig, p.data
}

// count counts p, given or written.
func (q *query) count(p *pkt) {
	if q.res.Packets > 0 && p.ts < q.lastTS {
		q.res.Late++
	} else {
		q.lastTS = p.ts
	}
	q.res.Packets++
}

// ensure writes o's interface block if it is not written yet.
func (q *query) ensure(o *outIface) error {
	if o.w >= 0 {
		return nil
	}
	i, err := q.w.AddInterface(o.ifc)
	o.w = i
	return err
}

// flush writes out what Run's output buffers.
func (q *query) flush() error {
	if q.bw == nil {
		return nil
	}
	return q.bw.Flush()
}

// writeStats writes the statistics blocks kept, in time order, as many
// as --max-bytes leaves room for (none for Each).
func (q *query) writeStats() error {
	if q.w == nil {
		return nil
	}
	slices.SortStableFunc(q.stats, func(a, b stats) int { return cmp.Compare(a.st.Timestamp, b.st.Timestamp) })
	for _, s := range q.stats {
		o := q.outs[s.out]
		if q.cfg.MaxBytes > 0 {
			need := pcapfile.StatsSize(s.st)
			if o.w < 0 {
				need += pcapfile.InterfaceSize(o.ifc)
			}
			if q.w.Written()+need > q.cfg.MaxBytes {
				return nil
			}
		}
		if err := q.ensure(o); err != nil {
			return err
		}
		if err := q.w.WriteStats(o.w, s.st); err != nil {
			return err
		}
	}
	return nil
}

// maxDescribe bounds the section's comment (a pcapng option holds at
// most 65535 bytes): a longer selection is cut, the cut said.
const maxDescribe = 4 << 10

// describe is the query in words, at most maxDescribe bytes of valid
// UTF-8: the first line of the section's comment (sectionComment).
func (q *query) describe() string {
	s := q.describeAll()
	if len(s) <= maxDescribe {
		return s
	}
	note := fmt.Sprintf(" ... (%d bytes of the selection left out)", len(s))
	cut := maxDescribe - len(note)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf(" ... (%d bytes of the selection left out)", len(s)-cut)
}

// describeAll is the query in words, whole.
func (q *query) describeAll() string {
	var b strings.Builder
	b.WriteString("pcapsync query")
	if len(q.cfg.Agents) > 0 {
		fmt.Fprintf(&b, " --agent %s", strings.Join(q.cfg.Agents, ","))
	}
	if len(q.cfg.Ifaces) > 0 {
		fmt.Fprintf(&b, " --iface %s", strings.Join(q.cfg.Ifaces, ","))
	}
	if !q.cfg.Since.IsZero() {
		fmt.Fprintf(&b, " --since %s", q.cfg.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.cfg.Until.IsZero() {
		fmt.Fprintf(&b, " --until %s", q.cfg.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.cfg.Filter != "" {
		fmt.Fprintf(&b, " %s", q.cfg.Filter)
	}
	return b.String()
}

// String is r on one line, for people.
func (r Result) String() string {
	s := fmt.Sprintf("%d packets, %d bytes written; %d agents, %d files read, %d skipped by their times",
		r.Packets, r.Bytes, r.Agents, r.FilesRead, r.FilesSkipped)
	s += fmt.Sprintf("; %d bytes read, %d files through their index (%d blocks read, %d skipped), %d scanned whole",
		r.BytesRead, r.FilesIndexed, r.BlocksRead, r.BlocksSkipped, r.FilesScanned)
	if r.Late > 0 {
		s += fmt.Sprintf("; %d late (written after a later packet)", r.Late)
	}
	switch r.Stopped {
	case "":
	case "interrupted":
		s += "; interrupted"
	default:
		s += "; stopped by --" + r.Stopped
	}
	return s
}

// refuseFilter refuses the filter, before anything is written, when
// libpcap refuses it for every link type of the selection, as tcpdump
// -r refuses a filter its file's link type cannot take ("inbound" on
// Ethernet): the error wraps ErrBadFilter and libpcap's message. The
// link types are those of the interfaces before the first packet of
// each file in the range, looked at until one takes the filter (one
// file, most often). A file that cannot be read here is left to the
// query, which reports it; with no file selected, nothing is refused.
// An interface of another link type met later whose type refuses the
// filter passes nothing (Result.FilterRefused).
func (q *query) refuseFilter(ctx context.Context) error {
	if q.cfg.Filter == "" {
		return nil
	}
	var refused error
	taken := false
	q.eachLinkType(ctx, func(lt uint16) bool {
		err := q.filter.Compile(ctx, lt)
		switch {
		case err == nil:
			taken, refused = true, nil
			return false
		case !errors.Is(err, capture.ErrBadFilter):
			refused = fmt.Errorf("filter: %w", err)
			return false
		case refused == nil:
			refused = &filterError{err}
		}
		return true
	})
	if taken {
		return nil
	}
	return refused
}

// eachLinkType calls f with each link type of the interfaces the
// selected files describe before their first packets (files whose
// times the retention index says miss the range left out), once each,
// in the order of the agents and their files, until f returns false.
func (q *query) eachLinkType(ctx context.Context, f func(uint16) bool) {
	var seen []uint16
	var k kit
	defer k.close()
	for _, s := range q.all {
		for _, fi := range s.files {
			if fi.Times && (fi.Last < q.since || fi.First >= q.until) {
				continue
			}
			for _, lt := range fileLinkTypes(ctx, fi, &k) {
				if slices.Contains(seen, lt) {
					continue
				}
				seen = append(seen, lt)
				if !f(lt) {
					return
				}
			}
		}
	}
}

// selectionLinkTypes returns the link types of cfg's selection
// (query.eachLinkType), none if its root cannot be listed.
func selectionLinkTypes(ctx context.Context, cfg Config) []uint16 {
	cfg.Logger = nil
	q := &query{cfg: cfg}
	q.since, q.until = cfg.bounds()
	streams, err := q.streams()
	if err != nil {
		return nil
	}
	defer func() {
		for _, s := range streams {
			s.close()
		}
	}()
	q.all = streams
	var lts []uint16
	q.eachLinkType(ctx, func(lt uint16) bool { lts = append(lts, lt); return true })
	return lts
}

// fileLinkTypes returns the link types of the interfaces a data file
// describes before its first packet; none when it cannot be read.
func fileLinkTypes(ctx context.Context, fi layout.FileInfo, k *kit) []uint16 {
	src, err := openFile(ctx, fi, k, nil, nil)
	if err != nil || src == nil {
		return nil
	}
	defer src.close()
	var p pcapfile.Packet
	src.next(&p) // reads the interfaces before the first packet; EOF is fine
	var lts []uint16
	for _, ifc := range src.interfaces() {
		lts = append(lts, ifc.LinkType)
	}
	return lts
}
