package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

const flowsUsage = `Reads the flow records beside the data files below an output root
(FILE.flows: one record per conversation per file, written as the
packets are) and prints the flows selected: who talked to whom, how
much, when and how it ended. A flow spanning files or split into parts
is one line per agent, its records joined. FILTER (tcpdump syntax) is
the trailing words or --filter; it runs on one packet made from the
flow's key, sent by the initiator: "host X" selects X's conversations,
"src host X" those X started, "dst port 443" those to port 443.

--since and --until (as query takes them) select the flows whose first
to last packet overlap the range; --agent and --iface as query's.

Output: a table, --json (one object per line) or --csv. --top N sums
the flows per --group (host: each address; pair: the two addresses;
port: the responder's protocol and port; agent) and prints the N
largest --by bytes, packets or flows. --same gathers the same
conversation seen by several agents (by Community ID). --sort orders
the flows by first (the default), last, bytes, packets or duration.

At exit a summary on stderr (--summary text or json) counts the flows
and the data files read, and says which flows are not shown: data
files without flow records (written with --flows=false or before flow
records: run pcapsync index DIR) and flow files that do not verify
(skipped, each with a warning), and the data the agents keep. When
there was nothing to answer from (no agent matches --agent, or the
range is outside the data kept) the exit status is 3, with the reason.
docs/flows.md has examples and the JSON keys.

--from HOST:PORT reads the flows of a collector or writer serving
--query-listen (GET /flows), over HTTPS (--tls-ca, --tls-cert,
--tls-key, --token-file; plain HTTP with --insecure), as query --from.
--from A,B,C (and --servers FILE) asks every server at once and sorts,
sums and gathers their flows together; each flow says its server (the
JSON key "server", the CSV column "server", a SERVER column in the
table when there are several). A server that fails fails the command,
naming it; with --partial the others' flows are printed, exit status
4. The summary gives each server's outcome and what it read (its
flows, data files, files without flow records, the data kept); exit
status 3 when no server had anything to answer from. --server-timeout
gives up a server that sends nothing for that long.`

type flowsFlags struct {
	cfg          flowquery.Config
	since, until string
	json, csv    bool
	top          int
	group, by    string
	sort         string
	same         bool
	srv          serverFlags
	servers      int               // asked; the table has a SERVER column past one
	partial      error             // errPartial: some servers failed, --partial given
	summary      *summaryFormat    // the summary on stderr
	local        flowquery.Summary // what --dir read
	remote       []serverFlows     // what each server of --from gave
}

func flowsCommand(s streams) *cobra.Command {
	c := leaf("flows (--dir DIR | --from HOST:PORT[,HOST:PORT...] [--servers FILE] [--partial] [--server-timeout D] [TLS flags | --insecure]) [--json|--csv] [--top N [--group host|pair|port|agent] [--by bytes|packets|flows]] [--same] [--sort KEY] [--agent GLOB] [--iface GLOB] [--since T] [--until T] [FILTER]",
		"print the flow records (conversations) of many agents: who talked to whom, how much, when; top talkers",
		flowsUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
			f := &flowsFlags{}
			fs.StringVar(&f.cfg.Dir, "dir", "", "the output root to read (required)")
			fs.StringSliceVar(&f.cfg.Agents, "agent", nil, "only these agents: names or globs (default: all)")
			fs.StringSliceVar(&f.cfg.Ifaces, "iface", nil, "only these interfaces: AGENT:IF or IF, names or globs (default: all)")
			fs.StringVar(&f.since, "since", "", "flows with packets at or after this time, as query's --since")
			fs.StringVar(&f.until, "until", "", "flows with packets before this time, as query's --until")
			fs.StringVar(&f.cfg.CommunityID, "community-id", "", "only the flows of this Community ID (1:...), as query's --community-id")
			fs.StringVar(&f.cfg.Filter, "filter", "", "tcpdump-syntax filter on the flows' addresses, ports, protocols and VLANs (src: the initiator; or give it as the trailing arguments)")
			fs.BoolVar(&f.json, "json", false, "one JSON object per line")
			fs.BoolVar(&f.csv, "csv", false, "CSV with a header line")
			fs.IntVar(&f.top, "top", 0, "print the N largest groups of flows (--group, --by) instead of the flows")
			fs.StringVar(&f.group, "group", flowquery.GroupHost, "with --top, sum per host, pair, port or agent")
			fs.StringVar(&f.by, "by", flowquery.ByBytes, "with --top, rank by bytes, packets or flows")
			fs.StringVar(&f.sort, "sort", "first", "order the flows by first, last, bytes, packets or duration")
			fs.BoolVar(&f.same, "same", false, "gather the same conversation seen by several agents (by Community ID)")
			fs.IntVar(&f.cfg.MaxFlows, "max-flows", flowquery.DefaultMaxFlows, "the most flows held to join and sort; more is an error")
			f.srv.define(fs, "flows")
			f.summary = addSummaryFlag(fs)
			return func(ctx context.Context, args []string) error {
				if err := filterArgs(fs, args, &f.cfg.Filter); err != nil {
					return err
				}
				if err := f.check(fs); err != nil {
					return err
				}
				if f.top > 0 && !f.srv.given() {
					return f.runTop(ctx, s)
				}
				flows, err := f.load(ctx, s)
				if err != nil && !errors.Is(err, errUncovered) {
					return err
				}
				if perr := f.print(s.stdout, flows); perr != nil {
					return perr // a usage error of --top or --sort first
				}
				if ferr := f.finish(s); ferr != nil {
					return ferr
				}
				if err != nil {
					return err
				}
				return f.partial
			}
		})
	annotate(c.Flags(), "filter", annPositional)
	return c
}

// check refuses flags that do not go together.
func (f *flowsFlags) check(fs *pflag.FlagSet) error {
	switch {
	case f.json && f.csv:
		return usageError("--json and --csv exclude each other")
	case f.top < 0:
		return usageError("--top %d: want a number above 0", f.top)
	case f.top > 0 && f.same:
		return usageError("--top and --same exclude each other")
	case f.top == 0 && (fs.Changed("group") || fs.Changed("by")):
		return usageError("--group and --by go with --top")
	case f.srv.given() && f.cfg.Dir != "":
		return usageError("--dir and --from exclude each other (--from reads the server's own root)")
	case !f.srv.given() && f.cfg.Dir == "":
		return usageError("flows needs --dir (or --from)")
	case f.cfg.CommunityID != "" && (&query.Config{Dir: ".", CommunityID: f.cfg.CommunityID}).Validate() != nil:
		return usageError("--community-id %q: want 1: and 28 base64 characters", f.cfg.CommunityID)
	}
	return f.srv.check(fs)
}

// load selects the flows, here or from --from.
func (f *flowsFlags) load(ctx context.Context, s streams) ([]flowquery.Flow, error) {
	if f.srv.given() {
		return f.loadRemote(ctx, s)
	}
	cfg, err := f.localConfig(s)
	if err != nil {
		return nil, err
	}
	flows, res, err := flowquery.Run(ctx, cfg)
	if err = localErr(err); err != nil {
		return nil, err
	}
	f.local = flowquery.Summarize(cfg, res, len(flows))
	if f.local.Uncovered != "" {
		return nil, fmt.Errorf("%w: %s", errUncovered, f.local.Uncovered)
	}
	return flows, nil
}

// runTop is --top over --dir: the flows summed per group as they are
// read (flowquery.RunTop), never all held.
func (f *flowsFlags) runTop(ctx context.Context, s streams) error {
	cfg, err := f.localConfig(s)
	if err != nil {
		return err
	}
	top, res, err := flowquery.RunTop(ctx, cfg, f.group, f.by, f.top)
	if err = localErr(err); err != nil {
		return err
	}
	f.local = flowquery.Summarize(cfg, res, res.Flows)
	if err := f.printTop(s.stdout, top); err != nil {
		return err
	}
	if err := f.finish(s); err != nil {
		return err
	}
	if f.local.Uncovered != "" {
		return fmt.Errorf("%w: %s", errUncovered, f.local.Uncovered)
	}
	return nil
}

// localConfig is the selection of --dir.
func (f *flowsFlags) localConfig(s streams) (flowquery.Config, error) {
	cfg := f.cfg
	var err error
	if cfg.Since, cfg.Until, err = parseRange(f.since, f.until, time.Now()); err != nil {
		return cfg, err
	}
	cfg.Logger = warnLogger(s.stderr)
	return cfg, nil
}

// localErr makes a flowquery error of the flags a usage error.
func localErr(err error) error {
	if errors.Is(err, flowquery.ErrConfig) || errors.Is(err, flowquery.ErrBadFilter) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
}

// finish prints the summary on stderr: of --dir, or of each server of
// --from.
func (f *flowsFlags) finish(s streams) error {
	if f.srv.given() {
		fs := flowsFromSummary{Servers: f.remote}
		for _, v := range f.remote {
			if v.Result != nil { // printed
				fs.Flows += v.Flows
			}
		}
		return f.summary.print(s.stderr, fs)
	}
	return f.summary.print(s.stderr, flowsSummary{f.local, f.cfg.Dir})
}

// flowsSummary is pcapsync flows --dir's summary: the flows selected,
// the data files looked at, and those whose flows are not (all) known.
type flowsSummary struct {
	flowquery.Summary
	dir string // the root, for the advice
}

func (s flowsSummary) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pcapsync flows: %d flows from %d data files", s.Flows, s.Files)
	if s.Writing > 0 {
		fmt.Fprintf(&b, " (%d being written: their flows as far as they ended)", s.Writing)
	}
	b.WriteString("\n")
	if s.NoFlows > 0 {
		fmt.Fprintf(&b, "pcapsync flows: %d data files have no flow records (written with --flows=false or before flow records): their flows are not shown; run pcapsync index %s\n",
			s.NoFlows, s.dir)
	}
	if s.Damaged > 0 {
		fmt.Fprintf(&b, "pcapsync flows: %d flow files did not verify and were skipped (named above): their flows are not shown; run pcapsync index %s\n",
			s.Damaged, s.dir)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// print writes the flows as the flags ask.
func (f *flowsFlags) print(w io.Writer, flows []flowquery.Flow) error {
	if f.top > 0 {
		top, err := flowquery.Top(flows, f.group, f.by, f.top)
		if err != nil {
			return fmt.Errorf("%w: %w", errUsage, err)
		}
		return f.printTop(w, top)
	}
	if err := flowquery.Sort(flows, f.sort); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	var groups [][]flowquery.Flow
	if f.same {
		groups = flowquery.Group(flows)
	} else {
		for i := range flows {
			groups = append(groups, flows[i:i+1])
		}
	}
	switch {
	case f.json:
		return printFlowsJSON(w, groups, f.same)
	case f.csv:
		return printFlowsCSV(w, groups, f.servers > 0)
	}
	return printFlowsTable(w, groups, f.same, f.servers > 1)
}

func printFlowsJSON(w io.Writer, groups [][]flowquery.Flow, same bool) error {
	enc := json.NewEncoder(w)
	for _, g := range groups {
		if !same {
			if err := enc.Encode(g[0].JSON()); err != nil {
				return err
			}
			continue
		}
		sg := struct {
			CommunityID string           `json:"community_id"`
			First       string           `json:"first"`
			Last        string           `json:"last"`
			Agents      int              `json:"agents"`
			Seen        []flowquery.JSON `json:"seen"`
		}{CommunityID: g[0].CommunityID}
		first, last := g[0].First, g[0].Last
		for i := range g {
			first, last = min(first, g[i].First), max(last, g[i].Last)
			sg.Seen = append(sg.Seen, g[i].JSON())
		}
		sg.First, sg.Last, sg.Agents = flowquery.FormatTime(first), flowquery.FormatTime(last), len(g)
		if err := enc.Encode(sg); err != nil {
			return err
		}
	}
	return nil
}

// printFlowsCSV writes the flows as CSV, with server a last column
// "server".
func printFlowsCSV(w io.Writer, groups [][]flowquery.Flow, server bool) error {
	cw := csv.NewWriter(w)
	head := flowquery.CSVHeader
	if server {
		head = append(slices.Clip(head), "server")
	}
	_ = cw.Write(head)
	for _, g := range groups {
		for i := range g {
			row := g[i].CSV()
			if server {
				row = append(row, g[i].Server)
			}
			_ = cw.Write(row)
		}
	}
	cw.Flush()
	return cw.Error()
}

// printFlowsTable writes a table for people: times in the local zone;
// with server, a first column SERVER.
func printFlowsTable(w io.Writer, groups [][]flowquery.Flow, same, server bool) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if server {
		fmt.Fprint(tw, "SERVER\t")
	}
	fmt.Fprintln(tw, "FIRST\tDURATION\tIFACE\tPROTO\tSRC\t\tDST\tPACKETS\tBYTES\tEND")
	for _, g := range groups {
		for i := range g {
			fl := &g[i]
			ind := ""
			if same && i > 0 {
				ind = "  = "
			}
			if server {
				fmt.Fprint(tw, fl.Server+"\t")
			}
			fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t->\t%s\t%d/%d\t%d/%d\t%s\n", ind,
				time.Unix(0, fl.First).In(localZone).Format("2006-01-02 15:04:05.000000"),
				time.Duration(fl.Last-fl.First).Round(time.Microsecond), fl.Iface, flowquery.ProtoName(&fl.Key),
				flowquery.Endpoint(&fl.Key, true), flowquery.Endpoint(&fl.Key, false),
				fl.Packets[0], fl.Packets[1], fl.Bytes[0], fl.Bytes[1], fl.End)
		}
	}
	return tw.Flush()
}

func (f *flowsFlags) printTop(w io.Writer, top []flowquery.Talker) error {
	switch {
	case f.json:
		enc := json.NewEncoder(w)
		for _, t := range top {
			if err := enc.Encode(t); err != nil {
				return err
			}
		}
		return nil
	case f.csv:
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{strings.ToLower(f.group), "flows", "packets", "bytes"})
		for _, t := range top {
			_ = cw.Write([]string{t.Key, strconv.FormatUint(t.Flows, 10), strconv.FormatUint(t.Packets, 10), strconv.FormatUint(t.Bytes, 10)})
		}
		cw.Flush()
		return cw.Error()
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tFLOWS\tPACKETS\tBYTES\t\n", strings.ToUpper(f.group))
	for _, t := range top {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t\n", t.Key, t.Flows, t.Packets, t.Bytes)
	}
	return tw.Flush()
}

// loadRemote is --from (GET /flows of every server): their flows
// together, in the order of a local run (first time, agent, interface),
// then the servers' order; at most --max-flows in all. With --partial,
// the flows of the servers that answered in full (a server that failed
// midway gives none: its answer is incomplete).
func (f *flowsFlags) loadRemote(ctx context.Context, s streams) ([]flowquery.Flow, error) {
	ccs, err := f.srv.clients(s.stderr)
	if err != nil {
		return nil, err
	}
	p := queryhttp.Params{Agents: f.cfg.Agents, Ifaces: f.cfg.Ifaces, Filter: f.cfg.Filter, CommunityID: f.cfg.CommunityID}
	now := time.Now()
	if p.Since, err = remoteTime("since", f.since, now); err != nil {
		return nil, err
	}
	if p.Until, err = remoteTime("until", f.until, now); err != nil {
		return nil, err
	}
	f.servers = len(ccs)
	got := make([][]flowquery.Flow, len(ccs))
	results := make([]queryhttp.FlowsResult, len(ccs))
	var held atomic.Int64
	outs := askAll(ctx, ccs, maxParallel, f.srv.timeout, func(ctx context.Context, i int, st *stall) (int, error) {
		cc := ccs[i]
		cc.Params = p
		var err error
		results[i], err = queryhttp.FetchFlows(ctx, cc, func(j *flowquery.JSON) error {
			st.alive()
			if held.Add(1) > int64(f.cfg.MaxFlows) {
				return fmt.Errorf("%w: more than %d from the servers together (--max-flows)", flowquery.ErrTooManyFlows, f.cfg.MaxFlows)
			}
			fl, err := j.Flow()
			fl.Server = cc.Addr
			got[i] = append(got[i], fl)
			return err
		})
		return len(got[i]), err
	})
	for _, o := range outs {
		if errors.Is(o.err, flowquery.ErrTooManyFlows) {
			return nil, o.err
		}
	}
	if err := settle(outs, f.srv.partial, "flows", io.Discard); err != nil && !errors.Is(err, errPartial) {
		return nil, err
	} else if err != nil {
		f.partial = err // each server's outcome in the summary
	}
	var flows []flowquery.Flow
	for i, o := range outs {
		v := serverFlows{Server: o.Server, Outcome: o.Outcome, Reason: o.Reason, Flows: o.Items}
		if o.Outcome == outcomeOK {
			flows = append(flows, got[i]...)
			v.Result = &results[i]
		}
		f.remote = append(f.remote, v)
	}
	slices.SortStableFunc(flows, func(a, b flowquery.Flow) int {
		return cmp.Or(cmp.Compare(a.First, b.First), strings.Compare(a.Agent, b.Agent), strings.Compare(a.Iface, b.Iface))
	})
	return flows, remoteUncovered(f.remote, len(flows))
}

// remoteUncovered is errUncovered with each server's reason when no
// server that answered had anything to answer from (its result's
// Uncovered set: flowquery.Uncovered's rule) and none sent a flow; else
// nil.
func remoteUncovered(servers []serverFlows, n int) error {
	var why []string
	for _, v := range servers {
		switch {
		case v.Result == nil: // failed (--partial)
		case v.Result.Uncovered == "":
			return nil
		default:
			why = append(why, v.Server+": "+v.Result.Uncovered)
		}
	}
	if n > 0 || len(why) == 0 {
		return nil
	}
	if len(servers) == 1 {
		return fmt.Errorf("%w: %s", errUncovered, servers[0].Result.Uncovered)
	}
	return fmt.Errorf("%w: no server holds flows of the selection in the range: %s", errUncovered, strings.Join(why, "; "))
}

// serverFlows is what one server of flows --from gave: its outcome, the
// flows received and, when ok, its result.
type serverFlows struct {
	Server  string                 `json:"server"`
	Outcome string                 `json:"outcome"`
	Reason  string                 `json:"reason,omitempty"`
	Flows   int                    `json:"flows"`
	Result  *queryhttp.FlowsResult `json:"result,omitempty"`
}

// flowsFromSummary is flows --from's summary: the flows of the servers
// printed, and each server's outcome and result.
type flowsFromSummary struct {
	Flows   int           `json:"flows"`
	Servers []serverFlows `json:"servers"`
}

func (s flowsFromSummary) writeText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "pcapsync flows: %d flows from %d servers\n", s.Flows, len(s.Servers))
	for _, v := range s.Servers {
		fmt.Fprintf(&b, "pcapsync flows: server %s: %s", v.Server, v.Outcome)
		if r := v.Result; r != nil {
			fmt.Fprintf(&b, ", %d flows from %d data files", v.Flows, r.Files)
			for _, c := range []struct {
				n    int
				what string
			}{{r.Writing, "being written"}, {r.NoFlows, "data files without flow records (their flows not shown)"},
				{r.Damaged, "flow files that did not verify (skipped)"}, {r.TimesUnknown, "data files of times not known"}} {
				if c.n > 0 {
					fmt.Fprintf(&b, "; %d %s", c.n, c.what)
				}
			}
			if r.Oldest != "" {
				fmt.Fprintf(&b, "; keeps %s to %s", r.Oldest, r.Newest)
			}
			if r.Uncovered != "" {
				b.WriteString("; nothing to answer from: " + r.Uncovered)
			}
		} else {
			if v.Flows > 0 {
				fmt.Fprintf(&b, " after %d flows", v.Flows)
			}
			b.WriteString(": " + v.Reason)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
