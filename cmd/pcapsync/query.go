package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

const queryUsage = `Reads the files below an output root (a collector's or a writer's
--dir) and writes the packets selected, of every agent, merged in
timestamp order: without -w one line per packet on stdout (the time,
AGENT:IF, the addresses, ports and protocol as tcpdump -n shows them;
--print adds them to -w FILE), with -w FILE or -w - (stdout: pipe it
into wireshark -k -i -, tshark -r - or tcpdump -r -) as one pcapng.
Every interface keeps its name from the files (web1:eth0). FILTER
(tcpdump syntax, as the agent takes it) is the trailing words or
--filter.

--since is inclusive, --until exclusive: a date and time as the lines,
Wireshark and tcpdump -tttt print it (2026-11-24 10:02:00.5, in the
system's zone or TZ's), RFC 3339 or with a zone (2026-11-24T10:02:00.5Z,
2026-11-24 11:02:00+01:00), a duration back from now (10m) or Unix
seconds (1732442520.5). --agent and --iface take names or
globs (*, ?, [...]), repeated or separated by commas; an --iface pattern
with a ':' matches AGENT:IF, one without the interface of any agent. The
files still being written are read up to their last complete batch.
Each file's index (FILE.idx) narrows what is read of it to the blocks
the time range and the filter may need; a file without a usable index is
read whole (--no-index: every file). docs/query.md says what is read
and in which order.

The summary (stderr) and the pcapng's comments say what the answer
covers: per agent the oldest and newest packet kept, what retention
removed in the range, the files not usable. Exit status: 0 answered
(maybe empty: the filter matched nothing in data that is kept), 1
failed, 2 usage, 3 nothing to answer from (no agent or interface
matches, or the range is outside every selected agent's kept data: the
message says why; the output is still written).

--community-id 1:... writes the packets of one flow (as pcapsync flows
prints it): only the index blocks its flow records name are read, and
each packet's Community ID is compared, so the result is exact.

--from HOST:PORT (or [V6]:PORT, https://HOST:PORT) runs the query on a
collector or writer that serves it (--query-listen) instead of reading
--dir here, over HTTPS (--tls-ca, --tls-cert, --tls-key, --token-file;
plain HTTP with --insecure): the same selection flags, the same output;
relative times are the server's, a date and time without a zone is
this system's.

--from a:7780,b:7780 (several, or --servers FILE, one per line) runs
the query on every server at once and writes their packets merged by
time, as the agents are merged (ties: agent name, then server order):
each interface keeps its name, its description names the server. A
server that fails (refused, unreachable, timed out, cut off) fails the
query, naming it; --partial writes what the others gave (exit status
4). --server-timeout gives up a server that sends nothing that long.
Exit statuses: 0 answered, 1 failed, 2 usage, 3 nothing to answer
from, 4 partial (docs/query.md).

--follow goes on live once the files are read, as the collector writes
(| wireshark -k -i -): until every agent's packets are past --until,
--count or --max-bytes, or Ctrl-C (the output stays a whole pcapng). A
packet waits at most --follow-delay for the other agents to catch up;
one that comes later than that, older than a packet already written,
is written all the same and counted as late.`

// localZone is the zone of the times query reads and prints without
// one: the system's, or TZ's (time.Local). Tests set another.
var localZone = time.Local

type queryFlags struct {
	cfg          query.Config
	since, until string
	out          string
	print        bool // --print: lines on stdout beside -w FILE
	summary      *summaryFormat
	srv          serverFlags // --from, --servers and theirs, instead of --dir
}

func queryCommand(s streams) *cobra.Command {
	c := leaf("query (--dir DIR | --from HOST:PORT[,HOST:PORT...] [--servers FILE] [--partial] [--server-timeout D] [TLS flags | --insecure]) [-w FILE|- [--print]] [--agent GLOB] [--iface GLOB] [--since T] [--until T] [--count N] [--max-bytes SIZE] [--follow] [FILTER]",
		"print or write the captured packets of many agents, by time, interface and filter, as lines or one pcapng",
		queryUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
			f := &queryFlags{}
			fs.StringVar(&f.cfg.Dir, "dir", "", "the output root to read (required)")
			fs.StringVarP(&f.out, "write", "w", "", "write the pcapng to this file, or - for stdout (default: one line per packet on stdout)")
			fs.BoolVar(&f.print, "print", false, "with -w FILE, also print one line per packet on stdout (as tcpdump --print)")
			fs.StringSliceVar(&f.cfg.Agents, "agent", nil, "only these agents: names or globs (default: all)")
			fs.StringSliceVar(&f.cfg.Ifaces, "iface", nil, "only these interfaces: AGENT:IF or IF, names or globs (default: all)")
			fs.StringVar(&f.since, "since", "", "the first time included: a date and time (2026-11-24 10:02:00.5, the local zone unless one is given: Z, +01:00), RFC 3339, a duration back from now (10m) or Unix seconds")
			fs.StringVar(&f.until, "until", "", "the first time excluded, as --since")
			fs.StringVar(&f.cfg.Filter, "filter", "", "tcpdump-syntax filter (or give it as the trailing arguments)")
			fs.StringVar(&f.cfg.CommunityID, "community-id", "", "only the packets of this Community ID (1:...), reading only the index blocks its flow records name")
			fs.BoolVar(&f.cfg.NoIndex, "no-index", false, "read every file whole, without the index beside it")
			fs.Int64Var(&f.cfg.Count, "count", 0, "stop after this many packets (default: no limit)")
			fs.Var(sizeFlag{&f.cfg.MaxBytes}, "max-bytes", "stop before the output would exceed this size, e.g. 100M (default: no limit)")
			f.cfg.ReorderMem = query.DefaultReorderMem
			fs.Var(sizeFlag{&f.cfg.ReorderMem}, "reorder-mem", "memory that puts each agent's packets in timestamp order, shared by the agents read")
			fs.IntVar(&f.cfg.Threads, "threads", query.DefaultThreads, "goroutines that read, decompress and splice the files at once beside the merge, above 1 with a goroutine per agent that parses, filters and orders its packets (0: the CPUs this process may use; 1: one goroutine for everything); the output is the same")
			fs.BoolVar(&f.cfg.Follow, "follow", false, "go on live: read the files being written as they grow, new files and new agents, until --until is passed or Ctrl-C")
			f.cfg.FollowDelay = query.DefaultFollowDelay
			fs.DurationVar(&f.cfg.FollowDelay, "follow-delay", query.DefaultFollowDelay, "with --follow, how long a packet waits at most for the other agents before it is written")
			f.summary = addSummaryFlag(fs)
			f.srv.define(fs, "packets")
			return func(ctx context.Context, args []string) error {
				if err := filterArgs(fs, args, &f.cfg.Filter); err != nil {
					return err
				}
				if f.print && (f.out == "" || f.out == "-") {
					return usageError("--print goes with -w FILE (without -w the lines are printed; -w - is the pcapng on stdout)")
				}
				if err := f.srv.check(fs); err != nil {
					return err
				}
				if f.srv.given() {
					if fs.Changed("reorder-mem") || fs.Changed("no-index") || fs.Changed("threads") {
						return usageError("--reorder-mem, --no-index and --threads are the server's with --from")
					}
					if f.cfg.Follow || fs.Changed("follow-delay") {
						return usageError("--follow is not served over --from: run it on the collector, or query the range again")
					}
					return runRemoteQueries(ctx, s, f, fs)
				}
				return runQuery(ctx, s, f)
			}
		})
	annotate(c.Flags(), "filter", annPositional)
	return c
}

// config checks the flags and fills the query's Config.
func (f *queryFlags) config(now time.Time, stderr io.Writer) (query.Config, error) {
	cfg := f.cfg
	if cfg.Dir == "" {
		return cfg, usageError("query needs --dir (or --from)")
	}
	var err error
	if cfg.Since, cfg.Until, err = parseRange(f.since, f.until, now); err != nil {
		return cfg, err
	}
	cfg.Logger = warnLogger(stderr)
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	if cfg.CommunityID != "" && !cfg.NoIndex {
		if cfg.Blocks, err = flowquery.Blocks(context.Background(), cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// parseRange reads --since and --until (query.ParseTimeIn, relative to
// now, a time without a zone in the system's); a flag not given is the
// zero time.
func parseRange(since, until string, now time.Time) (s, u time.Time, err error) {
	for _, t := range []struct {
		flag, v string
		dst     *time.Time
	}{{"since", since, &s}, {"until", until, &u}} {
		if t.v == "" {
			continue
		}
		v, err := query.ParseTimeIn(t.v, now, localZone)
		if err != nil {
			return s, u, usageError("--%s: %v", t.flag, err)
		}
		*t.dst = v
	}
	return s, u, nil
}

// warnLogger logs warnings and errors to stderr: a file the query scans
// whole because its index does not verify, say.
func warnLogger(stderr io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func runQuery(ctx context.Context, s streams, f *queryFlags) error {
	cfg, err := f.config(time.Now(), s.stderr)
	if err != nil {
		return err
	}
	q, err := query.Prepare(ctx, cfg) // the filter compiled, before -w is created
	if errors.Is(err, query.ErrBadFilter) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	if err != nil {
		return err
	}
	out, err := f.openLocalOutput(s)
	if err != nil {
		return err
	}
	var each func(*query.Packet) error // nil: nothing to print, no call a packet
	if out.lines != nil {
		each = out.lines.packet
	}
	res, err := q.RunEach(ctx, out.w, each)
	if err != nil && out.lines != nil && errors.Is(err, out.lines.err) {
		err = fmt.Errorf("printing: %w", err)
	}
	return f.finish(s, res, out.close(err))
}

// finish prints the summary (stdout may be the output) and returns
// err, the query's; a query that ran without error but had nothing to
// answer from (query.Result.Covered false: no agent or interface
// matched, or the range is outside every agent's kept data) is
// errUncovered with the reason (exit 3), unless it followed.
func (f *queryFlags) finish(s streams, res query.Result, err error) error {
	if perr := f.summary.print(s.stderr, querySummary{res}); err == nil {
		err = perr
	}
	if err == nil && !f.cfg.Follow && !res.Covered() {
		msg := strings.TrimPrefix(query.Uncovered(f.cfg, res), errUncovered.Error()+": ")
		err = fmt.Errorf("%w: %s", errUncovered, msg)
	}
	return err
}

// output is where a query's pcapng goes: -w FILE, -w - (stdout), or
// without -w the lines of pktline on stdout (--print: -w FILE and the
// lines).
type output struct {
	w       io.Writer
	file    *os.File
	pw      *io.PipeWriter
	printed chan error   // the printer's end
	lines   *linePrinter // a local query's lines, instead of pw
}

func (f *queryFlags) openOutput(s streams) (*output, error) {
	o := &output{}
	var ws []io.Writer
	switch f.out {
	case "":
	case "-":
		ws = append(ws, s.stdout)
	default:
		file, err := os.Create(f.out)
		if err != nil {
			return nil, fmt.Errorf("-w: %w", err)
		}
		o.file = file
		ws = append(ws, file)
	}
	if f.out == "" || f.print {
		pr, pw := io.Pipe()
		o.pw, o.printed = pw, make(chan error, 1)
		loc := localZone
		go func() {
			_, err := pktline.Print(s.stdout, pr, loc)
			pr.CloseWithError(err) // the query's writes fail with it
			o.printed <- err
		}()
		ws = append(ws, pw)
	}
	o.w = ws[0]
	if len(ws) > 1 {
		o.w = io.MultiWriter(ws...)
	}
	return o, nil
}

// openLocalOutput is openOutput for a query of --dir: its lines
// printed from the packets as they are written (query.RunEach), not
// from the pcapng read back through a pipe; without -w, the pcapng is
// only counted.
func (f *queryFlags) openLocalOutput(s streams) (*output, error) {
	if f.out != "" && !f.print {
		return f.openOutput(s)
	}
	o := &output{w: io.Discard}
	if f.out != "" {
		file, err := os.Create(f.out)
		if err != nil {
			return nil, fmt.Errorf("-w: %w", err)
		}
		o.file, o.w = file, file
	}
	o.lines = &linePrinter{w: bufio.NewWriterSize(s.stdout, 64<<10), loc: localZone}
	if f.cfg.Follow {
		// The query flushes its output every round: the lines too
		// (one goroutine: Threads does not apply to --follow).
		o.w = flushingWriter{o.w, o.lines}
	}
	return o, nil
}

// linePrinter prints a line per packet (pktline.AppendLine) to w.
type linePrinter struct {
	w    *bufio.Writer
	loc  *time.Location
	line []byte
	err  error // of a write to w
}

// packet prints p's line; nil prints nothing (a nil linePrinter).
func (l *linePrinter) packet(p *query.Packet) error {
	if l == nil {
		return nil
	}
	l.line = pktline.AppendLine(l.line[:0], &pktline.Packet{Timestamp: p.Timestamp, Iface: p.Interface.Name,
		LinkType: p.Interface.LinkType, OrigLen: p.OrigLen, Data: p.Data}, l.loc)
	l.line = append(l.line, '\n')
	if _, err := l.w.Write(l.line); err != nil {
		l.err = err
		return err
	}
	return nil
}

// flush writes out the lines buffered.
func (l *linePrinter) flush() error {
	if err := l.w.Flush(); err != nil {
		l.err = err
		return err
	}
	return nil
}

// flushingWriter flushes the lines whenever the pcapng is written out.
type flushingWriter struct {
	w     io.Writer
	lines *linePrinter
}

func (f flushingWriter) Write(p []byte) (int, error) {
	if err := f.lines.flush(); err != nil {
		return 0, err
	}
	return f.w.Write(p)
}

// close ends the output after the query ended with err: the printer's
// last lines written, the file closed. It returns err with what failed.
func (o *output) close(err error) error {
	if o.lines != nil && o.lines.err == nil {
		if perr := o.lines.flush(); perr != nil {
			err = errors.Join(err, fmt.Errorf("printing: %w", perr))
		}
	}
	if o.pw != nil {
		o.pw.Close()
		if perr := <-o.printed; perr != nil && !errors.Is(err, perr) {
			err = errors.Join(err, fmt.Errorf("printing: %w", perr))
		}
	}
	if o.file != nil {
		err = errors.Join(err, o.file.Close())
	}
	return err
}

// runRemoteQuery runs the query cc on one server and writes what it
// streams, byte for byte.
func runRemoteQuery(ctx context.Context, s streams, f *queryFlags, cc queryhttp.ClientConfig) error {
	out, err := f.openOutput(s)
	if err != nil {
		return err
	}
	res, err := federate.Fetch(ctx, cc, f.srv.timeout, out.w)
	streamed := err == nil || errors.Is(err, queryhttp.ErrFailed) // not refused
	err = out.close(tlsHint(err, "--from"))
	if errors.Is(err, queryhttp.ErrBadRequest) {
		err = fmt.Errorf("%w: %w", errUsage, err)
	}
	if !streamed {
		return err
	}
	return f.finish(s, res, err)
}

// serverAddr reads --from: HOST:PORT, [V6]:PORT or https://HOST:PORT
// (a '/' after it allowed). Another scheme, https:// with --insecure, a
// path, query or user, and a missing host or port are usage errors.
func serverAddr(from string, insecure bool) (string, error) {
	s := from
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		switch {
		case !strings.EqualFold(scheme, "https"):
			return "", usageError("--from %q: the query listener speaks HTTPS (https://HOST:PORT), or plain HTTP to HOST:PORT with --insecure", from)
		case insecure:
			return "", usageError("--from %q: https:// and --insecure exclude each other", from)
		}
		s = strings.TrimSuffix(rest, "/")
	}
	if strings.ContainsAny(s, "/?#@") {
		return "", usageError("--from %q: want the server, HOST:PORT or https://HOST:PORT, without a path, query or user", from)
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		hint := ""
		if strings.Count(s, ":") > 1 && !strings.HasPrefix(s, "[") {
			hint = " (an IPv6 address in brackets: [2001:db8::1]:7780)"
		}
		return "", usageError("--from %q: want HOST:PORT or https://HOST:PORT%s", from, hint)
	}
	if n, err := strconv.ParseUint(port, 10, 16); host == "" || err != nil || n == 0 {
		return "", usageError("--from %q: want a host and a port (1-65535)", from)
	}
	return net.JoinHostPort(host, port), nil
}

// remoteTime is --since or --until as --from sends it: a relative time
// as given (the server's clock), an absolute one read here (a date and
// time without a zone is this system's) and sent in RFC 3339, UTC.
func remoteTime(flag, v string, now time.Time) (string, error) {
	if v == "" || query.IsRelative(v) {
		return v, nil
	}
	t, err := query.ParseTimeIn(v, now, localZone)
	if err != nil {
		return "", usageError("--%s: %v", flag, err)
	}
	return t.UTC().Format(time.RFC3339Nano), nil
}

// querySummary is the query's summary, on stderr (stdout may be the
// pcapng); its JSON is query.Result's.
type querySummary struct {
	query.Result
}

// writeText writes the Result's line, then a line per selected agent
// with its coverage.
func (q querySummary) writeText(w io.Writer) error {
	if _, err := fmt.Fprintln(w, "pcapsync query:", q.Result); err != nil {
		return err
	}
	for _, c := range q.Coverage {
		if _, err := fmt.Fprintln(w, "pcapsync query: coverage:", c.String()); err != nil {
			return err
		}
	}
	return nil
}
