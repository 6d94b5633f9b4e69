package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Query makes (or, from a kept work directory, reuses) an output root of
// cfg.Bytes bytes from cfg.Agents agents (makeQueryData), then runs two
// queries over it, each on three sides for cfg.Rounds rounds, the sides
// alternating: pcapsync query through the indexes, pcapsync query
// --no-index, and mergecap of every data file piped into tcpdump (with
// editcap -A/-B between them for a time range). The needle asks for one
// host over the whole time, the broad query for TCP in one minute. Then
// the export (issue 30): every packet of the root into one file, by
// pcapsync query, by mergecap -w and by cat (the read-and-write floor),
// the filesystem synced before each run. Every run's output must hold
// the packets the generator put there, on every side; Query fails
// otherwise.
func Query(ctx context.Context, cfg QueryConfig) (QueryResult, error) {
	cfg = cfg.withDefaults()
	var res QueryResult
	if cfg.Exe == "" {
		return res, errors.New("bench query: QueryConfig.Exe (the pcapsync binary) is required")
	}
	if cfg.Bytes < 1<<20 || cfg.Agents < 1 || cfg.Span < 2*time.Minute || cfg.Rounds < 1 || cfg.Rotate < 4096 {
		return res, errors.New("bench query: want at least 1 MiB, 1 agent, 2 minutes of packet time, 1 round and a rotation of 4 KiB")
	}
	for _, tool := range []string{"mergecap", "editcap", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			return res, fmt.Errorf("bench query: %s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	if cfg.Cold && os.Geteuid() != 0 {
		return res, fmt.Errorf("bench query: --cold drops the page cache: %w", ErrNeedsRoot)
	}
	work := cfg.Dir
	if work == "" {
		d, err := os.MkdirTemp("", "pcapsync-qbench")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		work = d
	} else if err := os.MkdirAll(work, 0o750); err != nil {
		return res, err
	}
	want := QueryData{Version: queryDataVersion, Bytes: cfg.Bytes, Agents: cfg.Agents, Span: cfg.Span, Rotate: cfg.Rotate}
	d, ok := loadQueryData(work, want)
	if !ok {
		// the root, its indexes, and the export's output beside it
		if err := checkFree(work, 2*cfg.Bytes+cfg.Bytes/4); err != nil {
			return res, fmt.Errorf("bench query: %w", err)
		}
		start := time.Now()
		var err error
		if d, err = makeQueryData(ctx, work, want); err != nil {
			return res, fmt.Errorf("bench query: making the output root: %w", err)
		}
		logf(cfg.Log, "made %s: %d files, %s bytes, %d packets in %s", filepath.Join(work, queryRoot), d.Files, groupDigits(d.DataBytes), d.Packets, time.Since(start).Round(time.Millisecond))
	} else {
		logf(cfg.Log, "reusing %s: %d files, %s bytes, %d packets", filepath.Join(work, queryRoot), d.Files, groupDigits(d.DataBytes), d.Packets)
	}
	res.Data, res.Reused = d, ok
	env, err := newQueryEnv(cfg, work, d)
	if err != nil {
		return res, fmt.Errorf("bench query: %w", err)
	}
	if !cfg.Cold {
		for _, f := range append(env.files, env.idx...) {
			if _, err := warm(f); err != nil {
				return res, fmt.Errorf("bench query: %w", err)
			}
		}
	}
	for _, c := range env.cases() {
		qc := c.QueryCase
		for _, s := range c.sides {
			qc.Sides = append(qc.Sides, QuerySide{Name: s.name, Command: s.shell})
		}
		if !cfg.Cold {
			for _, s := range c.sides {
				if _, err := env.run(ctx, qc, s); err != nil {
					return res, fmt.Errorf("bench query: %s, warming %s: %w", qc.Name, s.name, err)
				}
			}
		}
		for round := range cfg.Rounds {
			for k := range c.sides {
				i := (round + k) % len(c.sides)
				r, err := env.run(ctx, qc, c.sides[i])
				if err != nil {
					res.Cases = append(res.Cases, qc)
					return res, fmt.Errorf("bench query: %s, round %d, %s: %w", qc.Name, round+1, c.sides[i].name, err)
				}
				qc.Sides[i].Runs = append(qc.Sides[i].Runs, r)
				logf(cfg.Log, "%s", queryRunLine(qc, round+1, c.sides[i].name, r))
			}
		}
		res.Cases = append(res.Cases, qc)
	}
	return res, nil
}

// queryEnv is what every run gets.
type queryEnv struct {
	cfg        QueryConfig
	work, root string
	files, idx []string // data files, index files
	data       QueryData
}

func newQueryEnv(cfg QueryConfig, work string, d QueryData) (*queryEnv, error) {
	root := filepath.Join(work, queryRoot)
	files, idx, _, err := queryFiles(root)
	if err != nil {
		return nil, err
	}
	return &queryEnv{cfg: cfg, work: work, root: root, files: files, idx: idx, data: d}, nil
}

// querySide is one side of a case: the stages of its pipeline (the
// last one writes OUT), and its shell form.
type querySide struct {
	name   string
	stages []qstage
	shell  string
}

type qstage struct {
	name string
	args []string
}

type queryCaseRun struct {
	QueryCase
	sides []querySide
}

// outToken stands for the side's output file in its stages' arguments.
const outToken = "\x00OUT"

// cases returns the needle and the broad query with their sides.
func (e *queryEnv) cases() []queryCaseRun {
	glob := filepath.Join(e.root, "*", "*.pcapng") // the data files: plain, as makeQueryData writes them
	since := strconv.FormatInt(e.data.Since.Unix(), 10)
	until := strconv.FormatInt(e.data.Until.Unix(), 10)
	out := func(s string) string { return strings.ReplaceAll(s, outToken, "OUT") }
	mk := func(name string, bound []string, filter string, want int64, about string) queryCaseRun {
		q := append([]string{e.cfg.Exe, "query", "--dir", e.root, "-w", outToken, "--summary", "json"}, bound...)
		ours := append(q, filter)
		noIx := append(append(slices0(q), "--no-index"), filter)
		merge := qstage{"mergecap", append([]string{"mergecap", "-w", "-"}, e.files...)}
		td := qstage{"tcpdump", []string{"tcpdump", "-r", "-", "-w", outToken, filter}}
		stages := []qstage{merge, td}
		shell := shellQuote([]string{"mergecap", "-w", "-"}) + " " + glob + " | " + shellQuote(td.args)
		if len(bound) > 0 {
			ed := qstage{"editcap", []string{"editcap", "-A", since, "-B", until, "-", "-"}}
			stages = []qstage{merge, ed, td}
			shell = shellQuote([]string{"mergecap", "-w", "-"}) + " " + glob + " | " + shellQuote(ed.args) + " | " + shellQuote(td.args)
		}
		return queryCaseRun{
			QueryCase: QueryCase{Name: name, About: about, Filter: filter, Want: want},
			sides: []querySide{
				{SidePcapsync, []qstage{{"pcapsync query", ours}}, out(shellQuote(ours))},
				{SideNoIndex, []qstage{{"pcapsync query --no-index", noIx}}, out(shellQuote(noIx))},
				{SideMergecap, stages, out(shell)},
			},
		}
	}
	export := []string{e.cfg.Exe, "query", "--dir", e.root, "-w", outToken, "--summary", "json"}
	mergeW := append([]string{"mergecap", "-w", outToken}, e.files...)
	// sh execs cat, so the process measured is cat's
	cat := append([]string{"sh", "-c", `exec cat "$@" > "$0"`, outToken}, e.files...)
	return []queryCaseRun{
		mk("needle", nil, "host "+e.data.Needle, e.data.NeedleN,
			fmt.Sprintf("one host, %s, over the whole time", e.data.Needle)),
		mk("broad", []string{"--since", since, "--until", until}, "tcp", e.data.RangeTCP,
			fmt.Sprintf("TCP from %s to %s, one minute of %s; the time bound by editcap -A/-B on the comparison side, as tcpdump's filter cannot select by time",
				e.data.Since.Format(time.RFC3339), e.data.Until.Format(time.RFC3339), e.data.Last.Sub(e.data.First).Round(time.Second))),
		{
			QueryCase: QueryCase{Name: CaseExport, Want: e.data.Packets,
				About: "every packet of every agent into one file, merged in time order (mergecap, pcapsync) or one file after the other (cat, the floor of reading and writing the bytes)"},
			sides: []querySide{
				{SidePcapsync, []qstage{{"pcapsync query", export}}, out(shellQuote(export))},
				{SideMergecapW, []qstage{{"mergecap", mergeW}}, "mergecap -w OUT " + glob},
				{SideCat, []qstage{{"cat", cat}}, "cat " + glob + " > OUT"},
			},
		},
	}
}

func slices0(s []string) []string { return append([]string(nil), s...) }

// run runs one side once and checks its output.
func (e *queryEnv) run(ctx context.Context, c QueryCase, s querySide) (QueryRun, error) {
	out := filepath.Join(e.work, "out-"+c.Name+".pcap")
	if err := os.RemoveAll(out); err != nil {
		return QueryRun{}, err
	}
	defer os.Remove(out)
	if e.cfg.Cold {
		if err := dropCaches(); err != nil {
			return QueryRun{}, err
		}
	} else if c.Name == CaseExport {
		// it writes as much as it reads: no run pays for another's writeback
		if err := syncFS(e.work); err != nil {
			return QueryRun{}, err
		}
	}
	r, procs, err := runStages(ctx, s.stages, out)
	if err != nil {
		return r, err
	}
	if r.Packets, err = countPackets(out); err != nil {
		return r, fmt.Errorf("counting the output: %w", err)
	}
	if strings.HasPrefix(s.name, "pcapsync") {
		sum, err := parseQuerySummary(procs[0].stderr.Bytes())
		if err != nil {
			return r, err
		}
		if sum.Packets != int64(r.Packets) {
			return r, fmt.Errorf("the summary says %d packets, the output holds %d", sum.Packets, r.Packets)
		}
		r.Summary = &sum
	}
	if int64(r.Packets) != c.Want {
		return r, fmt.Errorf("%d packets in the output, want %d (the packets the generator put in the result); the sides disagree", r.Packets, c.Want)
	}
	return r, nil
}

// runStages runs stages as a pipeline, each stage's stdout into the
// next one's stdin, outToken in their arguments replaced by out, and
// times it from the first start to the last exit.
func runStages(ctx context.Context, stages []qstage, out string) (QueryRun, []*proc, error) {
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	var procs []*proc
	var stdin *os.File
	start := time.Now()
	for i, st := range stages {
		args := slices0(st.args)
		for j, a := range args {
			if a == outToken {
				args[j] = out
			}
		}
		var pr, pw *os.File
		if i < len(stages)-1 {
			var err error
			if pr, pw, err = os.Pipe(); err != nil {
				return QueryRun{}, nil, err
			}
		}
		in := stdin
		p, err := ps.start(st.name, func(c *exec.Cmd) {
			if in != nil {
				c.Stdin = in
			}
			if pw != nil {
				c.Stdout = pw
			}
		}, args...)
		for _, f := range []*os.File{in, pw} {
			if f != nil {
				f.Close()
			}
		}
		if err != nil {
			if pr != nil {
				pr.Close()
			}
			return QueryRun{}, nil, err
		}
		procs = append(procs, p)
		stdin = pr
	}
	var errs []error
	for _, p := range procs {
		if err := p.wait(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %s", p.name, err, strings.TrimSpace(p.stderr.String())))
		}
	}
	r := QueryRun{Wall: time.Since(start)}
	for _, p := range procs {
		r.Procs = append(r.Procs, p.usage)
	}
	return r, procs, errors.Join(errs...)
}

// parseQuerySummary reads pcapsync query's JSON summary, the last line
// of its stderr that holds an object.
func parseQuerySummary(stderr []byte) (QuerySummary, error) {
	var s QuerySummary
	lines := bytes.Split(bytes.TrimSpace(stderr), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); bytes.HasPrefix(l, []byte("{")) {
			if err := json.Unmarshal(l, &s); err != nil {
				return s, fmt.Errorf("query summary %q: %w", l, err)
			}
			return s, nil
		}
	}
	return s, fmt.Errorf("no JSON summary in the query's stderr: %q", stderr)
}

// dropCaches writes back dirty pages and drops the page cache (root).
func dropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("dropping the page cache: %w", err)
	}
	return nil
}

// syncFS writes back the dirty pages of dir's filesystem (an earlier
// run's output), so that no run pays for another's.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Syncfs(int(f.Fd())); err != nil {
		return fmt.Errorf("syncfs %s: %w", dir, err)
	}
	return nil
}

// checkFree fails unless dir's filesystem has need bytes free.
func checkFree(dir string, need int64) error {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	if free := int64(st.Bavail) * st.Bsize; free < need {
		return fmt.Errorf("%s has %s free, the root and outputs need %s", dir, fmtBytes(free), fmtBytes(need))
	}
	return nil
}

// logf writes a line to w, if not nil.
func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, format+"\n", args...)
	}
}
