package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// QueryConfig describes a query comparison. The zero value of each
// field but Exe means its default.
type QueryConfig struct {
	Exe    string        // the pcapsync binary to run; required
	Bytes  int64         // data bytes of the output root; 0 means 2 GiB
	Agents int           // agents; 0 means 8
	Span   time.Duration // packet time the root spans; 0 means 10 minutes
	Rotate int64         // the store's RotateSize; 0 means 64 MiB
	Rounds int           // 0 means 3
	// Dir is the work directory, kept afterwards: its root is reused when
	// it was made for the same Bytes, Agents, Span and Rotate. "" means a
	// temporary one, removed.
	Dir string
	// Cold drops the page cache (as root) before every measured run
	// instead of warming every side with a run of its own first.
	Cold bool
	Log  io.Writer // every run's figures as they come; nil means none
}

func (c QueryConfig) withDefaults() QueryConfig {
	if c.Bytes == 0 {
		c.Bytes = 2 << 30
	}
	if c.Agents == 0 {
		c.Agents = 8
	}
	if c.Span == 0 {
		c.Span = 10 * time.Minute
	}
	if c.Rotate == 0 {
		c.Rotate = 64 << 20
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	return c
}

// The sides a query case compares, in the order of its tables.
const (
	SidePcapsync = "pcapsync query"
	SideNoIndex  = "pcapsync query --no-index"
	SideMergecap = "mergecap | tcpdump"
)

// CaseExport is the name of the export case; its sides are these.
const (
	CaseExport    = "export"
	SideMergecapW = "mergecap -w"
	SideCat       = "cat"
)

// QueryRun is one run of one side.
type QueryRun struct {
	Wall    time.Duration // first process start to the last one's end
	Procs   []ProcUsage   // one per process, in the same order every run
	Packets int           // in the side's output file
	Summary *QuerySummary // pcapsync's own account (--summary json); nil for the others
}

// QuerySummary is the part of pcapsync query's JSON summary the bench
// reports.
type QuerySummary struct {
	Packets       int64 `json:"packets"`
	BytesRead     int64 `json:"bytes_read"`
	FilesRead     int   `json:"files_read"`
	FilesIndexed  int   `json:"files_indexed"`
	FilesScanned  int   `json:"files_scanned"`
	BlocksRead    int64 `json:"blocks_read"`
	BlocksSkipped int64 `json:"blocks_skipped"`
}

// CPU returns the CPU time of all the run's processes.
func (r QueryRun) CPU() time.Duration {
	var t time.Duration
	for _, p := range r.Procs {
		t += p.CPU()
	}
	return t
}

// RChar returns the bytes the run's processes read (rchar): the first
// process's alone, the one that reads the files, since the others read
// what it wrote into a pipe.
func (r QueryRun) RChar() int64 { return r.Procs[0].IO.RChar }

// ReadBytes returns the bytes all the run's processes had fetched from
// storage.
func (r QueryRun) ReadBytes() int64 {
	var n int64
	for _, p := range r.Procs {
		n += p.IO.ReadBytes
	}
	return n
}

// MaxRSS returns the largest peak RSS of the run's processes.
func (r QueryRun) MaxRSS() int64 {
	var n int64
	for _, p := range r.Procs {
		n = max(n, p.MaxRSS)
	}
	return n
}

// QuerySide is every run of one side of a case.
type QuerySide struct {
	Name    string
	Command string // what it runs, as a shell command line
	Runs    []QueryRun
}

// med returns the median over the runs of f.
func (s QuerySide) med(f func(QueryRun) float64) float64 { return medianOf(s.Runs, f) }

// Wall returns the median wall time.
func (s QuerySide) Wall() time.Duration {
	return time.Duration(s.med(func(r QueryRun) float64 { return float64(r.Wall) }))
}

// QueryCase is one query (needle or broad) with all its sides.
type QueryCase struct {
	Name   string // "needle", "broad"
	About  string // what it asks
	Filter string
	Want   int64 // the packets the generator put in its result
	Sides  []QuerySide
}

func (c QueryCase) side(name string) QuerySide {
	for _, s := range c.Sides {
		if s.Name == name {
			return s
		}
	}
	return QuerySide{Name: name}
}

// Ratio returns side's median wall time over pcapsync query's (with
// its index); 0 without both.
func (c QueryCase) Ratio(side string) float64 {
	ours, other := c.side(SidePcapsync), c.side(side)
	if len(ours.Runs) == 0 || len(other.Runs) == 0 || ours.Wall() <= 0 {
		return 0
	}
	return float64(other.Wall()) / float64(ours.Wall())
}

// QueryResult is what Query measured.
type QueryResult struct {
	Data   QueryData
	Reused bool // the root was a kept one
	Cases  []QueryCase
}

// queryGoals are issue 16's: the comparison's time over pcapsync's,
// per case, and the share of the data bytes the needle may read.
var queryGoals = map[string]float64{"needle": 50, "broad": 5}

const (
	goalNeedleShare = 0.02
	goalRSS         = 100 << 20
)

// Goals returns issue 16's goals, each as a line ending in met or NOT
// MET, and whether all are met.
func (r QueryResult) Goals() ([]string, bool) {
	var lines []string
	all := len(r.Cases) > 0
	add := func(ok bool, format string, args ...any) {
		lines = append(lines, fmt.Sprintf(format, args...)+": "+metStr(ok))
		all = all && ok
	}
	var rss int64
	for _, c := range r.Cases {
		goal, ok := queryGoals[c.Name]
		if !ok {
			continue // the export: ExportGoals
		}
		ratio := c.Ratio(SideMergecap)
		add(ratio >= goal, "%s: %s / %s wall time %.1fx (goal >= %.0fx)", c.Name, SideMergecap, SidePcapsync, ratio, goal)
		ours := c.side(SidePcapsync)
		for _, run := range ours.Runs {
			rss = max(rss, run.MaxRSS())
		}
		if c.Name == "needle" && r.Data.DataBytes > 0 {
			share := ours.med(func(q QueryRun) float64 { return float64(q.RChar()) }) / float64(r.Data.DataBytes)
			add(share < goalNeedleShare, "needle: %s read %.2f%% of the data bytes (rchar, median; goal < %.0f%%)", SidePcapsync, 100*share, 100*goalNeedleShare)
		}
	}
	add(rss > 0 && rss < goalRSS, "%s peak RSS, largest of all runs: %s (goal < %s)", SidePcapsync, fmtBytes(rss), fmtBytes(goalRSS))
	return lines, all
}

// Paired returns the median over the rounds of side a's wall time over
// side b's in the same round; 0 without both.
func (c QueryCase) Paired(a, b string) float64 {
	sa, sb := c.side(a), c.side(b)
	n := min(len(sa.Runs), len(sb.Runs))
	if n == 0 {
		return 0
	}
	rs := make([]float64, n)
	for i := range n {
		rs[i] = float64(sa.Runs[i].Wall) / float64(max(sb.Runs[i].Wall, 1))
	}
	return median(rs)
}

// Issue 30's export goals: mergecap -w at least exportVsMergecap times
// the query's wall time, the query at most exportVsCat times cat's.
const (
	exportVsMergecap = 3
	exportVsCat      = 1.5
)

// ExportGoals returns issue 30's export goals, each as a line ending in
// met or NOT MET, judged by the median of the rounds' paired ratios
// (the sides of a round run one after the other, so a pair shares the
// machine's state), and whether all are met; no lines without the
// export case.
func (r QueryResult) ExportGoals() ([]string, bool) {
	var c QueryCase
	for _, k := range r.Cases {
		if k.Name == CaseExport {
			c = k
		}
	}
	if len(c.Sides) == 0 {
		return nil, false
	}
	vsMerge := c.Paired(SideMergecapW, SidePcapsync)
	vsCat := c.Paired(SidePcapsync, SideCat)
	lines := []string{
		fmt.Sprintf("export: %s / %s wall time %.2fx, the rounds' median (of medians %.2fx; goal >= %dx): %s",
			SideMergecapW, SidePcapsync, vsMerge, c.Ratio(SideMergecapW), exportVsMergecap, metStr(vsMerge >= exportVsMergecap)),
		fmt.Sprintf("export: %s / %s wall time %.2fx, the rounds' median (of medians %.2fx; goal <= %.1fx): %s",
			SidePcapsync, SideCat, vsCat, 1/max(c.Ratio(SideCat), 1e-9), exportVsCat, metStr(vsCat > 0 && vsCat <= exportVsCat)),
	}
	return lines, vsMerge >= exportVsMergecap && vsCat > 0 && vsCat <= exportVsCat
}

// WriteQuery writes what the root holds, then for each case the
// commands of its sides, a table of their medians (wall time, ratio to
// pcapsync query, CPU, bytes read, peak RSS, packets) with a row per
// process, and issue 16's goals.
func WriteQuery(w io.Writer, cfg QueryConfig, res QueryResult, markdown bool) error {
	cfg = cfg.withDefaults()
	d := res.Data
	ew := &errWriter{w: w}
	made := "made by this run"
	if res.Reused {
		made = "kept from an earlier run (--keep)"
	}
	ew.printf("Output root (%s): %d agents, %d files of %s bytes (%s) with %s bytes of indexes (%.2f%%) and %s bytes of flow records (%.3f%%) beside them, %s packets, %s to %s (%s of packet time). ",
		made, d.Agents, d.Files, groupDigits(d.DataBytes), fmtBytes(d.DataBytes), groupDigits(d.IdxBytes), 100*float64(d.IdxBytes)/float64(max(d.DataBytes, 1)),
		groupDigits(d.FlowBytes), 100*float64(d.FlowBytes)/float64(max(d.DataBytes, 1)),
		groupDigits(d.Packets), d.First.Format(time.RFC3339), d.Last.Format(time.RFC3339), d.Last.Sub(d.First).Round(time.Second))
	ew.printf("Written through the store as the collector writes (plain pcapng, its default; an index beside each file, default 512 KiB blocks; rotated at %s; batches of %d packets, each with its mark), all agents at once. ", fmtBytes(d.Rotate), queryBatch)
	ew.printf("Traffic: IMIX Ethernet frames (64/576/1500 bytes, 7:4:1), TCP %d%% and UDP, between each agent's own address and peers drawn from 10.0.0.0/16, in flows of %d packets on average, %d flows of an agent active at once (a packet belongs to one at random); the needle host %s has %d flows of %d packets on every agent: %d packets, %.3f%% of all.\n\n",
		tcpShare(), queryFlowLen, queryFlows, d.Needle, queryNeedleFlows, queryNeedleLen, d.NeedleN, 100*float64(d.NeedleN)/float64(max(d.Packets, 1)))
	if cfg.Cold {
		ew.printf("Cold: the page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before every measured run. ")
	} else {
		ew.printf("Warm: every file read once into the page cache, then every side run once unmeasured before the rounds, so that each finds in the cache what it reads (the page cache is not dropped between runs; --cold does). ")
	}
	ew.printf("The sides alternate, each round starting with the next one; medians of %d rounds, ratios of medians. Each side's output goes to a file in the work directory; the packets in it are counted afterwards, untimed, and must be the same on every side. CPU is user + system time from wait4; peak RSS the largest VmHWM of a process, sampled every 5 ms; bytes read is rchar of /proc/PID/io read once the process has exited (every read(2), page cache hits included) of the process that reads the files (pcapsync; mergecap), the share is of the data files' bytes; from storage is read_bytes (page cache misses) of all the side's processes; the query's own count (`bytes_read` of its `--summary json`) includes the index files it opened.\n\n", cfg.Rounds)
	for _, c := range res.Cases {
		ew.printf("%s (%s): %s.\n\n", c.Name, c.About, plural(c.Want, "packet"))
		for _, s := range c.Sides {
			ew.printf("- %s: `%s`\n", s.Name, s.Command)
		}
		if c.Name == "needle" && d.Blocks > 0 {
			fp := d.NeedleMay - d.NeedleBlocks
			ew.printf("\nIndex blocks: %d in all; %d hold a packet of the needle host, %d more the filters say may (false positives: %.2f%% of the blocks without it).\n",
				d.Blocks, d.NeedleBlocks, fp, 100*float64(fp)/float64(max(d.Blocks-d.NeedleBlocks, 1)))
		}
		ew.printf("\n")
		if ew.err == nil {
			ew.err = table(w, queryRows(c, d.DataBytes), markdown)
		}
		ew.printf("\n")
		if noIx := c.Ratio(SideNoIndex); noIx > 0 {
			ew.printf("The index's own gain: %s / %s wall time %.1fx.\n\n", SideNoIndex, SidePcapsync, noIx)
		}
	}
	lines, all := res.Goals()
	ew.printf("Goals (issue 16):\n\n")
	for _, l := range lines {
		ew.printf("- %s\n", l)
	}
	ew.printf("\nAll goals: %s\n", metStr(all))
	if lines, all := res.ExportGoals(); len(lines) > 0 {
		ew.printf("\nGoals (issue 30, exports):\n\n")
		for _, l := range lines {
			ew.printf("- %s\n", l)
		}
		ew.printf("\nBoth: %s\n", metStr(all))
	}
	return ew.err
}

// queryRows is a case's table: a row per side, then per process.
func queryRows(c QueryCase, dataBytes int64) [][]string {
	rows := [][]string{{"side, medians", "wall", "vs pcapsync query", "CPU s", "user / sys s", "bytes read (rchar)", "share of data", "from storage", "query's bytes_read", "blocks read / skipped", "peak RSS", "packets"}}
	for _, s := range c.Sides {
		if len(s.Runs) == 0 {
			continue
		}
		ratio := "-"
		if s.Name != SidePcapsync {
			ratio = fmt.Sprintf("%.1fx", c.Ratio(s.Name))
		}
		rchar := s.med(func(r QueryRun) float64 { return float64(r.RChar()) })
		own, blocks := "", ""
		if s.Runs[0].Summary != nil {
			own = groupDigits(int64(s.med(func(r QueryRun) float64 { return float64(r.Summary.BytesRead) })))
			sm := s.Runs[0].Summary
			blocks = fmt.Sprintf("%d / %d", sm.BlocksRead, sm.BlocksSkipped)
		}
		rows = append(rows, []string{
			s.Name, fmtDur(s.Wall()), ratio,
			fmt.Sprintf("%.3f", s.med(func(r QueryRun) float64 { return r.CPU().Seconds() })), "",
			groupDigits(int64(rchar)), fmt.Sprintf("%.2f%%", 100*rchar/float64(max(dataBytes, 1))),
			groupDigits(int64(s.med(func(r QueryRun) float64 { return float64(r.ReadBytes()) }))),
			own, blocks,
			fmtRSS(int64(s.med(func(r QueryRun) float64 { return float64(r.MaxRSS()) }))),
			fmt.Sprint(s.Runs[0].Packets),
		})
		if len(s.Runs[0].Procs) == 1 {
			p := func(f func(ProcUsage) float64) float64 {
				return s.med(func(r QueryRun) float64 { return f(r.Procs[0]) })
			}
			rows[len(rows)-1][4] = fmt.Sprintf("%.3f / %.3f", p(func(u ProcUsage) float64 { return u.User.Seconds() }), p(func(u ProcUsage) float64 { return u.Sys.Seconds() }))
			continue
		}
		for i, pu := range s.Runs[0].Procs {
			p := func(f func(ProcUsage) float64) float64 {
				return s.med(func(r QueryRun) float64 { return f(r.Procs[i]) })
			}
			rows = append(rows, []string{
				"  " + pu.Name, "", "",
				fmt.Sprintf("%.3f", p(func(u ProcUsage) float64 { return u.CPU().Seconds() })),
				fmt.Sprintf("%.3f / %.3f", p(func(u ProcUsage) float64 { return u.User.Seconds() }), p(func(u ProcUsage) float64 { return u.Sys.Seconds() })),
				groupDigits(int64(p(func(u ProcUsage) float64 { return float64(u.IO.RChar) }))), "",
				groupDigits(int64(p(func(u ProcUsage) float64 { return float64(u.IO.ReadBytes) }))),
				"", "",
				fmtRSS(int64(p(func(u ProcUsage) float64 { return float64(u.MaxRSS) }))), "",
			})
		}
	}
	return rows
}

// queryRunLine is one run's figures, for the log.
func queryRunLine(c QueryCase, round int, side string, r QueryRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s round %d %s: %.3f s, %d packets, CPU %.3f s, rchar %s, peak RSS %s", c.Name, round, side,
		r.Wall.Seconds(), r.Packets, r.CPU().Seconds(), groupDigits(r.RChar()), fmtRSS(r.MaxRSS()))
	if r.Summary != nil {
		fmt.Fprintf(&b, ", bytes_read %s, files %d indexed %d scanned, blocks %d read %d skipped", groupDigits(r.Summary.BytesRead),
			r.Summary.FilesIndexed, r.Summary.FilesScanned, r.Summary.BlocksRead, r.Summary.BlocksSkipped)
	}
	return b.String()
}

// tcpShare returns the percentage of flows that are TCP.
func tcpShare() int {
	n := 0
	for _, s := range queryServices {
		if s.proto == 6 {
			n += s.weight
		}
	}
	return n
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return groupDigits(n) + " " + what + "s"
}

// shellQuote quotes args for a POSIX shell where needed.
func shellQuote(args []string) string {
	q := slices.Clone(args)
	for i, a := range q {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;<>()*?[]#~") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
