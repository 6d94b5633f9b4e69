package flowquery

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Flow is one flow of one agent, its records joined (doc.go). Record
// holds the sums; its Part is the last part's, End the last part's end.
type Flow struct {
	flow.Record
	Agent       string
	Iface       string // "AGENT:IF" as the data file names it
	CommunityID string // "" for flows that are not IP
	Parts       []Part
	// Server is the query listener the flow came from (pcapsync flows
	// --from); "" for a flow read here.
	Server string
}

// Part is where one record of a flow is: its data file and index blocks.
type Part struct {
	File string // the data file's path (as listed: may end in .part)
	Runs []flow.BlockRun
}

// Result counts what a Run read.
type Result struct {
	Flows   int      // flows selected (each flow joined once)
	Files   int      // data files looked at
	Missing int      // closed data files without a flow file: their flows are not known
	Writing int      // data files being written (.part): flows known as far as they ended
	Damaged []string // flow files that did not verify (skipped), with the reason
	// Unflowed are the data files (paths as listed) whose flows are not
	// all known: without a flow file, with one that did not verify, or
	// being written (.part: a flow's record comes only as it ends).
	Unflowed []string
	// Agents counts the agents selected. Kept spans the packets their
	// data files keep, whatever the range, as far as known: from
	// retention's index (layout.FileInfo's times) or, for a file it
	// does not list, from the flow records of its flow file (read
	// anyway); TimesUnknown counts the files whose times are known
	// neither way (Uncovered).
	Agents       int
	Kept         layout.TimeRange
	TimesUnknown int
}

// Run selects the flows of cfg, joined, sorted by first time, then agent
// and interface (CompareRun; ties in the order read).
func Run(ctx context.Context, cfg Config) ([]Flow, Result, error) {
	var out []Flow
	res, err := Each(ctx, cfg, func(f *Flow) error {
		out = append(out, *f)
		return nil
	})
	if err != nil {
		return nil, res, err
	}
	return sortedRun(out), res, nil
}

// Each calls emit with every flow Run selects, joined, with its Parts
// and Community ID, one at a time as they are read, not sorted: Run's
// order is theirs sorted by CompareRun, ties (the same key and first
// time) in the order Each gave them. The flow emit
// gets is valid only during the call; its Parts stay valid after. The
// flows emitted and those waiting for their next part together are
// bounded by Config.MaxFlows, as Run's, with the same error. An error
// emit returns ends Each with it.
func Each(ctx context.Context, cfg Config, emit func(*Flow) error) (Result, error) {
	n := 0
	return each(ctx, cfg, true, func(f *Flow) error {
		n++
		return emit(f)
	}, func() int { return n })
}

// sortedRun returns out sorted by CompareRun, stably: a permutation sorted (ties by place), then applied,
// so that the sort moves indexes, not Flows.
func sortedRun(out []Flow) []Flow {
	perm := make([]int32, len(out))
	for i := range perm {
		perm[i] = int32(i)
	}
	slices.SortFunc(perm, func(i, j int32) int {
		return cmp.Or(CompareRun(&out[i], &out[j]), cmp.Compare(i, j))
	})
	sorted := make([]Flow, len(out))
	for k, i := range perm {
		sorted[k] = out[i]
	}
	return sorted
}

// RunTop returns Top of the flows Run would select, summed as they are
// read: only the flows waiting for their next part and the groups are
// held (Config.MaxFlows bounds them together), not every flow selected.
// Its result is Top(Run(cfg), group, measure, n)'s.
func RunTop(ctx context.Context, cfg Config, group, measure string, n int) ([]Talker, Result, error) {
	sums, err := newSummer(group, measure)
	if err != nil {
		return nil, Result{}, err
	}
	res, err := each(ctx, cfg, false, func(f *Flow) error {
		sums.add(f)
		return nil
	}, sums.len)
	if err != nil {
		return nil, res, err
	}
	return sums.top(n), res, nil
}

// each calls emit with every flow of cfg, joined, once, in no particular
// order; parts says whether the flows carry their Parts and Community ID.
// The flow emit gets is valid only during the call. held says how many
// flows (or groups) emit holds, counted with the flows waiting for their
// next part against MaxFlows.
func each(ctx context.Context, cfg Config, parts bool, emit func(*Flow) error, held func() int) (Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	var flt *filter.Filter
	if cfg.Filter != "" {
		f, err := filter.NewFor(ctx, cfg.Filter, []uint16{linkEthernet})
		if err != nil {
			if errors.Is(err, capture.ErrBadFilter) || errors.Is(err, capture.ErrFilterLimit) {
				return res, fmt.Errorf("%w: %w", ErrBadFilter, err)
			}
			return res, err
		}
		flt = f
	}
	agents, err := layout.Agents(cfg.Dir)
	if err != nil {
		return res, err
	}
	s := &selector{cfg: &cfg, flt: flt, res: &res, max: cmp.Or(cfg.MaxFlows, DefaultMaxFlows),
		parts: parts, emit: emit, held: held}
	s.since, s.until = cfg.bounds()
	for _, a := range agents {
		if !s.agentSelected(a) {
			continue
		}
		if err := s.agent(ctx, a); err != nil {
			return res, err
		}
	}
	return res, nil
}

type selector struct {
	cfg          *Config
	flt          *filter.Filter
	res          *Result
	max          int
	since, until int64
	parts        bool
	emit         func(*Flow) error
	held         func() int

	pending map[joinKey]*Flow // flows whose last record ended open or split
	free    []*Flow           // pending flows emitted, for reuse
	one     Flow              // a flow of one record, not pending
	rec     flow.Record       // the record decoded
	fbuf    []byte            // the flow file read (one buffer for all)
	buf     []byte            // the synthetic packet
	cid     []byte            // a Community ID
	br      *bufio.Reader     // a data file's start (interface names)
	pbuf    []byte            // its pcapng reader's buffer
}

// joinKey is a flow of one agent across its files: the key without the
// file's interface number, and the interface's name.
type joinKey struct {
	k     flow.Key
	iface string
}

func (s *selector) agentSelected(name string) bool {
	if len(s.cfg.Agents) > 0 && !slices.ContainsFunc(s.cfg.Agents, func(p string) bool { ok, _ := path.Match(p, name); return ok }) {
		return false
	}
	return true
}

func (s *selector) ifaceSelected(full string) bool {
	return layout.MatchIface(s.cfg.Ifaces, full)
}

// agent selects and joins the flows of one agent.
func (s *selector) agent(ctx context.Context, agent string) error {
	files, err := layout.AgentFiles(s.cfg.Dir, agent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // removed since listed
	}
	if err != nil {
		return err
	}
	s.res.Agents++
	if s.pending == nil {
		s.pending = map[joinKey]*Flow{}
	}
	for _, fi := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.res.Files++
		if fi.Times {
			s.res.Kept.Add(fi.First)
			s.res.Kept.Add(fi.Last)
		}
		if err := s.file(agent, fi); err != nil {
			return err
		}
	}
	for _, f := range s.pending {
		if err := s.keep(f); err != nil {
			return err
		}
	}
	clear(s.pending)
	return nil
}

// CompareRun orders flows as Run does: by first time, agent, interface,
// then key (flows of one agent and interface that began at the same
// time). Only flows of the same key and times compare equal.
func CompareRun(a, b *Flow) int {
	return cmp.Or(cmp.Compare(a.First, b.First), strings.Compare(a.Agent, b.Agent), strings.Compare(a.Iface, b.Iface), compareKeys(&a.Key, &b.Key))
}

// compareKeys orders keys by every field but the interface number (the
// interface is compared by name).
func compareKeys(a, b *flow.Key) int {
	return cmp.Or(bytes.Compare(a.Src[:], b.Src[:]), bytes.Compare(a.Dst[:], b.Dst[:]),
		slices.Compare(a.VLAN[:], b.VLAN[:]), cmp.Compare(a.NVLAN, b.NVLAN), cmp.Compare(a.Kind, b.Kind),
		cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Flags, b.Flags), cmp.Compare(a.EtherType, b.EtherType),
		cmp.Compare(a.SrcPort, b.SrcPort), cmp.Compare(a.DstPort, b.DstPort))
}

// file reads the flow file of data file fi and joins its records.
func (s *selector) file(agent string, fi layout.FileInfo) error {
	if fi.Part {
		s.res.Writing++
		s.res.Unflowed = append(s.res.Unflowed, fi.Path)
	}
	d, n, need, err := s.readFlowFile(fi)
	if err != nil && !fi.Times {
		s.res.TimesUnknown++ // no retention times, no flow records to tell them
	}
	if errors.Is(err, fs.ErrNotExist) {
		if !fi.Part {
			s.res.Missing++
			s.res.Unflowed = append(s.res.Unflowed, fi.Path)
		}
		return nil
	}
	if err != nil {
		s.damaged(fi.Path, err)
		if !fi.Part {
			s.res.Unflowed = append(s.res.Unflowed, fi.Path)
		}
		return nil
	}
	names := s.ifaceNames(fi.Path, need)
	for i, n := range names {
		names[i] = layout.IfaceName(agent, n) // as the query names them
	}
	unnamed := layout.IfaceName(agent, "")
	for i := 0; i < n && d.Next(&s.rec); i++ {
		r := &s.rec
		if !fi.Times { // the times kept, from the records
			s.res.Kept.Add(r.First)
			s.res.Kept.Add(r.Last)
		}
		name := unnamed
		if int(r.Key.Iface) < len(names) && names[r.Key.Iface] != "" {
			name = names[r.Key.Iface]
		}
		if !s.ifaceSelected(name) || !s.match(&r.Key) || !s.community(&r.Key) {
			continue
		}
		if err := s.add(agent, name, fi.Path, r); err != nil {
			return err
		}
	}
	return nil
}

func (s *selector) damaged(p string, err error) {
	s.res.Damaged = append(s.res.Damaged, fmt.Sprintf("%s: %v", flow.Path(p), err))
	if s.cfg.Logger != nil {
		s.cfg.Logger.Warn("flow file skipped", "file", flow.Path(p), "err", err)
	}
}

func (s *selector) match(k *flow.Key) bool {
	if s.flt == nil {
		return true
	}
	s.buf = synth(s.buf[:0], k)
	ok, _ := s.flt.Match(linkEthernet, s.buf, uint32(len(s.buf)))
	return ok
}

// community reports whether k has the Community ID asked (any without
// one asked).
func (s *selector) community(k *flow.Key) bool {
	if s.cfg.CommunityID == "" {
		return true
	}
	s.cid = k.AppendCommunityID(s.cid[:0], 0)
	return string(s.cid) == s.cfg.CommunityID
}

// add joins r to the flow it continues, or starts one. r is not kept.
func (s *selector) add(agent, iface, file string, r *flow.Record) error {
	jk := joinKey{k: r.Key, iface: iface}
	jk.k.Iface = 0
	f, ok := s.pending[jk]
	if ok && r.Part == f.Part+1 {
		delete(s.pending, jk)
		f.First, f.Last = min(f.First, r.First), max(f.Last, r.Last)
		for d := range 2 {
			f.Packets[d] += r.Packets[d]
			f.Bytes[d] += r.Bytes[d]
			f.Captured[d] += r.Captured[d]
			f.TCPFlags[d] |= r.TCPFlags[d]
		}
		// The last part's end: the parts before it ended open or split.
		f.End, f.Part, f.Flags = r.End, r.Part, f.Flags|r.Flags
	} else {
		if ok { // a continuation lost (a file removed, a damaged one): keep what was
			delete(s.pending, jk)
			if err := s.keep(f); err != nil {
				return err
			}
		}
		if len(s.pending)+s.held() >= s.max {
			return fmt.Errorf("%w: more than %d", ErrTooManyFlows, s.max)
		}
		f = &s.one
		if r.End == flow.EndOpen || r.End == flow.EndSplit {
			f = s.alloc()
		}
		*f = Flow{Record: *r, Agent: agent, Iface: iface}
	}
	if s.parts {
		f.Parts = append(f.Parts, Part{File: file, Runs: slices.Clone(r.Runs())})
	}
	if f.End == flow.EndOpen || f.End == flow.EndSplit {
		if f == &s.one { // a flow of one record going on
			p := s.alloc()
			*p = s.one
			f = p
		}
		s.pending[jk] = f
		return nil
	}
	return s.keep(f)
}

// alloc returns a Flow to hold in pending.
func (s *selector) alloc() *Flow {
	if n := len(s.free); n > 0 {
		f := s.free[n-1]
		s.free = s.free[:n-1]
		return f
	}
	return new(Flow)
}

// keep emits f if it overlaps the range; f is free again after.
func (s *selector) keep(f *Flow) error {
	var err error
	if f.Last >= s.since && f.First < s.until {
		if s.parts {
			f.CommunityID = f.Key.CommunityID(0)
		}
		s.res.Flows++
		err = s.emit(f)
	}
	if f != &s.one {
		*f = Flow{}
		s.free = append(s.free, f)
	}
	return err
}

// readFlowFile reads the flow file of fi into s.fbuf and verifies it: a
// .part's up to its last record that verifies, a closed file's whole or
// not at all. It returns a decoder at the first record, the records to
// read and the largest interface number they name (-1: none).
func (s *selector) readFlowFile(fi layout.FileInfo) (d *flow.Decoder, n, need int, err error) {
	p := flow.Path(fi.Path)
	f, err := safefs.Open(p)
	if errors.Is(err, fs.ErrNotExist) && fi.Part { // published since listed
		f, err = safefs.Open(flow.Path(strings.TrimSuffix(fi.Path, layout.PartSuffix)))
	}
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	if s.fbuf, err = readAll(f, s.fbuf[:0], maxFlowFile); err != nil {
		return nil, 0, 0, err
	}
	// First pass: verify (a closed file's flows are all or none) and
	// find the interfaces named; the second, the caller's, joins.
	if d, err = flow.NewDecoder(s.fbuf); err != nil {
		return nil, 0, 0, err
	}
	need = -1
	for d.Next(&s.rec) {
		n++
		need = max(need, int(s.rec.Key.Iface))
	}
	if err := d.Err(); err != nil && !(fi.Part && errors.Is(err, flow.ErrDamaged)) {
		return nil, 0, 0, err
	}
	d, err = flow.NewDecoder(s.fbuf)
	return d, n, need, err
}

// readAll appends what r holds to dst, up to limit bytes (more is
// flow.ErrDamaged).
func readAll(r *os.File, dst []byte, limit int) ([]byte, error) {
	if st, err := r.Stat(); err == nil && st.Size() <= int64(limit) {
		dst = slices.Grow(dst, int(st.Size())+1)
	}
	for {
		if len(dst) == cap(dst) {
			dst = slices.Grow(dst, 4096)
		}
		m, err := r.Read(dst[len(dst):min(cap(dst), limit+1)])
		dst = dst[:len(dst)+m]
		if len(dst) > limit {
			return dst, fmt.Errorf("%w: larger than %d bytes", flow.ErrDamaged, limit)
		}
		if err == io.EOF {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
}

// ifaceNames returns the names of the interfaces the data file at p
// describes, reading it until interface need is described (or its end);
// what it cannot read it leaves out. It reads through s's buffers.
func (s *selector) ifaceNames(p string, need int) []string {
	if need < 0 {
		return nil
	}
	f, err := safefs.Open(p)
	if errors.Is(err, fs.ErrNotExist) && strings.HasSuffix(p, layout.PartSuffix) {
		f, err = safefs.Open(strings.TrimSuffix(p, layout.PartSuffix))
	}
	if err != nil {
		return nil
	}
	defer f.Close()
	if s.br == nil {
		s.br = bufio.NewReaderSize(f, 64<<10)
		s.pbuf = make([]byte, pcapfile.ReaderBufferSize)
	}
	br := s.br
	br.Reset(f)
	var src io.Reader = br
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil
		}
		src = zr
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(index.MaxZstdWindow))
		if err != nil {
			return nil
		}
		defer zr.Close()
		src = zr
	}
	r, err := pcapfile.NewReader(src, &pcapfile.ReaderConfig{Buffer: s.pbuf})
	if err != nil {
		return nil
	}
	var pkt pcapfile.Packet
	for len(r.Interfaces()) <= need {
		if r.ReadInto(&pkt) != nil {
			break
		}
	}
	names := make([]string, len(r.Interfaces()))
	for i, ifc := range r.Interfaces() {
		names[i] = ifc.Name
	}
	return names
}

// Group gathers flows by Community ID (flows that are not IP stay
// alone), the groups in the order of their first flow: the same
// conversation as each agent saw it.
func Group(flows []Flow) [][]Flow {
	var groups [][]Flow
	at := map[string]int{}
	for _, f := range flows {
		if i, ok := at[f.CommunityID]; ok && f.CommunityID != "" {
			groups[i] = append(groups[i], f)
			continue
		}
		at[f.CommunityID] = len(groups)
		groups = append(groups, []Flow{f})
	}
	return groups
}

// Uncovered is why the flows query cfg, which gave r and n flows, had
// nothing to answer from, for people: no agent of the root matches its
// --agent (the agents there named, up to 8), or its range is outside
// what the selected agents keep (r.Kept). "" when it had something:
// flows, or an agent whose kept data overlaps the range or whose files'
// times are not all known.
func Uncovered(cfg Config, r Result, n int) string {
	since, until := cfg.bounds()
	switch {
	case n > 0 || r.TimesUnknown > 0:
		return ""
	case r.Agents == 0:
		there, _ := layout.Agents(cfg.Dir)
		if len(there) > 8 {
			there = append(there[:8], "...")
		}
		msg := "no agent of " + cfg.Dir + " matches"
		if len(cfg.Agents) > 0 {
			msg += " --agent " + strings.Join(cfg.Agents, ",")
		}
		if len(msg) > 1<<10 {
			msg = strings.ToValidUTF8(msg[:1<<10], "") + fmt.Sprintf("... (%d patterns)", len(cfg.Agents))
		}
		if len(there) == 0 {
			return msg + "; it holds no agent"
		}
		return msg + "; agents there: " + strings.Join(there, ",")
	case !r.Kept.OK:
		return "the agents selected keep no packet"
	case r.Kept.Min < until && r.Kept.Max >= since:
		return ""
	}
	return fmt.Sprintf("the range is outside the data kept of the agents selected: they keep %s to %s",
		time.Unix(0, r.Kept.Min).UTC().Format(time.RFC3339Nano), time.Unix(0, r.Kept.Max).UTC().Format(time.RFC3339Nano))
}

// Summary is a Result for people and scripts (pcapsync flows's summary,
// GET /flows's result): its counts, the data kept and Uncovered's
// reason.
type Summary struct {
	Flows   int `json:"flows"`
	Files   int `json:"files"`
	NoFlows int `json:"files_without_flows"` // closed, without a flow file: not shown
	Damaged int `json:"flow_files_damaged"`  // skipped whole
	Writing int `json:"files_being_written"` // flows shown as far as they ended
	Agents  int `json:"agents"`              // selected
	// Oldest and Newest are the oldest and newest packet the selected
	// agents keep, whatever the range (RFC 3339, UTC; "" when none is
	// known); TimesUnknown counts the files whose times are not known.
	Oldest       string `json:"oldest,omitempty"`
	Newest       string `json:"newest,omitempty"`
	TimesUnknown int    `json:"times_unknown,omitempty"`
	// Uncovered is Uncovered's reason: "" when there was something to
	// answer from.
	Uncovered string `json:"uncovered,omitempty"`
}

// Summarize is the Summary of r, what the flows query cfg read, which
// gave n flows.
func Summarize(cfg Config, r Result, n int) Summary {
	s := Summary{Flows: r.Flows, Files: r.Files, NoFlows: r.Missing, Damaged: len(r.Damaged),
		Writing: r.Writing, Agents: r.Agents, TimesUnknown: r.TimesUnknown, Uncovered: Uncovered(cfg, r, n)}
	if r.Kept.OK {
		s.Oldest = time.Unix(0, r.Kept.Min).UTC().Format(time.RFC3339Nano)
		s.Newest = time.Unix(0, r.Kept.Max).UTC().Format(time.RFC3339Nano)
	}
	return s
}
