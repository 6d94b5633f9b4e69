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
	"path"
	"slices"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/flow"
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
	Files   int      // data files looked at
	Missing int      // data files without a flow file
	Damaged []string // flow files that did not verify (skipped), with the reason
	// Unflowed are the data files (paths as listed) whose flows are not
	// all known: without a flow file, with one that did not verify, or
	// being written (.part: a flow's record comes only as it ends).
	Unflowed []string
}

// Run selects the flows of cfg, joined, sorted by first time, then agent
// and interface.
func Run(ctx context.Context, cfg Config) ([]Flow, Result, error) {
	var res Result
	if err := cfg.Validate(); err != nil {
		return nil, res, err
	}
	var flt *filter.Filter
	if cfg.Filter != "" {
		f, err := filter.NewFor(ctx, cfg.Filter, []uint16{linkEthernet})
		if err != nil {
			if errors.Is(err, capture.ErrBadFilter) || errors.Is(err, capture.ErrFilterLimit) {
				return nil, res, fmt.Errorf("%w: %w", ErrBadFilter, err)
			}
			return nil, res, err
		}
		flt = f
	}
	agents, err := layout.Agents(cfg.Dir)
	if err != nil {
		return nil, res, err
	}
	s := &selector{cfg: &cfg, flt: flt, res: &res, max: cmp.Or(cfg.MaxFlows, DefaultMaxFlows)}
	s.since, s.until = cfg.bounds()
	for _, a := range agents {
		if !s.agentSelected(a) {
			continue
		}
		if err := s.agent(ctx, a); err != nil {
			return nil, res, err
		}
	}
	slices.SortStableFunc(s.out, func(a, b Flow) int {
		return cmp.Or(cmp.Compare(a.First, b.First), strings.Compare(a.Agent, b.Agent), strings.Compare(a.Iface, b.Iface))
	})
	return s.out, res, nil
}

type selector struct {
	cfg          *Config
	flt          *filter.Filter
	res          *Result
	max          int
	since, until int64
	out          []Flow
	buf          []byte
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
	pending := map[joinKey]*Flow{}
	for _, fi := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.res.Files++
		if err := s.file(agent, fi, pending); err != nil {
			return err
		}
	}
	for _, f := range pending {
		if err := s.keep(f); err != nil {
			return err
		}
	}
	return nil
}

// file reads the flow file of data file fi and joins its records.
func (s *selector) file(agent string, fi layout.FileInfo, pending map[joinKey]*Flow) error {
	if fi.Part {
		s.res.Unflowed = append(s.res.Unflowed, fi.Path)
	}
	ff, err := readFlowFile(fi)
	if errors.Is(err, fs.ErrNotExist) {
		s.res.Missing++
		if !fi.Part {
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
	need := -1
	for i := range ff.Records {
		need = max(need, int(ff.Records[i].Key.Iface))
	}
	names := ifaceNames(fi.Path, need)
	for i := range ff.Records {
		r := &ff.Records[i]
		name := agent + ":"
		if int(r.Key.Iface) < len(names) && names[r.Key.Iface] != "" {
			name = names[r.Key.Iface]
		}
		if !s.ifaceSelected(name) || !s.match(&r.Key) || s.cfg.CommunityID != "" && r.Key.CommunityID(0) != s.cfg.CommunityID {
			continue
		}
		if err := s.add(agent, name, fi.Path, r, pending); err != nil {
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

// add joins r to the flow it continues, or starts one.
func (s *selector) add(agent, iface, file string, r *flow.Record, pending map[joinKey]*Flow) error {
	jk := joinKey{k: r.Key, iface: iface}
	jk.k.Iface = 0
	part := Part{File: file, Runs: slices.Clone(r.Runs())}
	f, ok := pending[jk]
	if ok && r.Part == f.Part+1 {
		delete(pending, jk)
		f.First, f.Last = min(f.First, r.First), max(f.Last, r.Last)
		for d := range 2 {
			f.Packets[d] += r.Packets[d]
			f.Bytes[d] += r.Bytes[d]
			f.Captured[d] += r.Captured[d]
			f.TCPFlags[d] |= r.TCPFlags[d]
		}
		f.End, f.Part, f.Flags = r.End, r.Part, f.Flags|r.Flags
		f.Parts = append(f.Parts, part)
	} else {
		if ok { // a continuation lost (a file removed, a damaged one): keep what was
			delete(pending, jk)
			if err := s.keep(f); err != nil {
				return err
			}
		}
		if len(s.out)+len(pending) >= s.max {
			return fmt.Errorf("%w: more than %d", ErrTooManyFlows, s.max)
		}
		f = &Flow{Record: *r, Agent: agent, Iface: iface, CommunityID: r.Key.CommunityID(0), Parts: []Part{part}}
	}
	if f.End == flow.EndOpen || f.End == flow.EndSplit {
		pending[jk] = f
		return nil
	}
	return s.keep(f)
}

// keep adds f to the result if it overlaps the range.
func (s *selector) keep(f *Flow) error {
	if f.Last < s.since || f.First >= s.until {
		return nil
	}
	s.out = append(s.out, *f)
	return nil
}

// readFlowFile reads and parses the flow file of fi: a .part's up to its
// last record that verifies, a closed file's whole or not at all.
func readFlowFile(fi layout.FileInfo) (*flow.File, error) {
	p := flow.Path(fi.Path)
	f, err := safefs.Open(p)
	if errors.Is(err, fs.ErrNotExist) && fi.Part { // published since listed
		f, err = safefs.Open(flow.Path(strings.TrimSuffix(fi.Path, layout.PartSuffix)))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFlowFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFlowFile {
		return nil, fmt.Errorf("%w: larger than %d bytes", flow.ErrDamaged, maxFlowFile)
	}
	ff, err := flow.Parse(b)
	if err != nil && !(fi.Part && errors.Is(err, flow.ErrDamaged) && ff != nil) {
		return nil, err
	}
	return ff, nil
}

// ifaceNames returns the names of the interfaces the data file at p
// describes, reading it until interface need is described (or its end);
// what it cannot read it leaves out.
func ifaceNames(p string, need int) []string {
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
	br := bufio.NewReaderSize(f, 64<<10)
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
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil
		}
		defer zr.Close()
		src = zr
	}
	r, err := pcapfile.NewReader(src, nil)
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
