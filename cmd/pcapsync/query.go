package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

const queryUsage = `Reads the files below an output root (a collector's or a writer's
--dir) and writes the packets selected, of every agent, merged in
timestamp order, as one pcapng to -w FILE or -w - (stdout: pipe it into
wireshark -k -i - or tshark -r -). Every interface keeps its name from
the files (web1:eth0). FILTER (tcpdump syntax, as the agent takes it) is
the trailing words or --filter.

--since is inclusive, --until exclusive: RFC 3339 with up to nine
fractional digits (2026-11-24T10:02:00.5Z), a duration back from now
(10m) or Unix seconds (1732442520.5). --agent and --iface take names or
globs (*, ?, [...]), repeated or separated by commas; an --iface pattern
with a ':' matches AGENT:IF, one without the interface of any agent. The
files still being written are read up to their last complete batch.
Each file's index (FILE.idx) narrows what is read of it to the blocks
the time range and the filter may need; a file without a usable index is
read whole (--no-index: every file). docs/query.md says what is read
and in which order.

--from HOST:PORT runs the query on a collector or writer that serves it
(--query-listen) instead of reading --dir here, over HTTPS (--tls-ca,
--tls-cert, --tls-key, --token-file; plain HTTP with --insecure): the
same selection flags, the same output; relative times are the server's.

--follow goes on live once the files are read, as the collector writes
(| wireshark -k -i -): until every agent's packets are past --until,
--count or --max-bytes, or Ctrl-C (the output stays a whole pcapng). A
packet waits at most --follow-delay for the other agents to catch up;
one that comes later than that, older than a packet already written,
is written all the same and counted as late.`

type queryFlags struct {
	cfg          query.Config
	since, until string
	out          string
	summary      *summaryFormat
	from         string          // a server's query listener, instead of --dir
	tls          *tapClientFlags // --from's TLS and token
}

func queryCommand(s streams) *cobra.Command {
	c := leaf("query (--dir DIR | --from HOST:PORT [TLS flags | --insecure]) -w FILE|- [--agent GLOB] [--iface GLOB] [--since T] [--until T] [--count N] [--max-bytes SIZE] [--follow] [FILTER]",
		"write the captured packets of many agents, by time, interface and filter, as one pcapng",
		queryUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
			f := &queryFlags{}
			fs.StringVar(&f.cfg.Dir, "dir", "", "the output root to read (required)")
			fs.StringVarP(&f.out, "write", "w", "", "write the pcapng to this file, or - for stdout (required)")
			fs.StringSliceVar(&f.cfg.Agents, "agent", nil, "only these agents: names or globs (default: all)")
			fs.StringSliceVar(&f.cfg.Ifaces, "iface", nil, "only these interfaces: AGENT:IF or IF, names or globs (default: all)")
			fs.StringVar(&f.since, "since", "", "the first time included: RFC 3339, a duration back from now (10m) or Unix seconds")
			fs.StringVar(&f.until, "until", "", "the first time excluded, as --since")
			fs.StringVar(&f.cfg.Filter, "filter", "", "tcpdump-syntax filter (or give it as the trailing arguments)")
			fs.BoolVar(&f.cfg.NoIndex, "no-index", false, "read every file whole, without the index beside it")
			fs.Int64Var(&f.cfg.Count, "count", 0, "stop after this many packets (default: no limit)")
			fs.Var(sizeFlag{&f.cfg.MaxBytes}, "max-bytes", "stop before the output would exceed this size, e.g. 100M (default: no limit)")
			f.cfg.ReorderMem = query.DefaultReorderMem
			fs.Var(sizeFlag{&f.cfg.ReorderMem}, "reorder-mem", "memory that puts each agent's packets in timestamp order, shared by the agents read")
			fs.BoolVar(&f.cfg.Follow, "follow", false, "go on live: read the files being written as they grow, new files and new agents, until --until is passed or Ctrl-C")
			f.cfg.FollowDelay = query.DefaultFollowDelay
			fs.DurationVar(&f.cfg.FollowDelay, "follow-delay", query.DefaultFollowDelay, "with --follow, how long a packet waits at most for the other agents before it is written")
			f.summary = addSummaryFlag(fs)
			fs.StringVar(&f.from, "from", "", "run the query on the collector or writer serving --query-listen at HOST:PORT, over HTTPS")
			f.tls = tapClientTLSFlags(fs, "--from")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					if fs.Changed("filter") {
						return usageError("give the filter either with --filter or as arguments, not both")
					}
					f.cfg.Filter = strings.Join(args, " ")
				}
				if f.from != "" {
					if fs.Changed("reorder-mem") {
						return usageError("--reorder-mem is the server's with --from")
					}
					if f.cfg.Follow || fs.Changed("follow-delay") {
						return usageError("--follow is not served over --from: run it on the collector, or query the range again")
					}
					return runRemoteQuery(ctx, s, f)
				}
				if f.tls.given(fs) {
					return usageError("the TLS flags, --token-file and --insecure go with --from")
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
	switch {
	case cfg.Dir == "":
		return cfg, usageError("query needs --dir")
	case f.out == "":
		return cfg, usageError("query needs -w FILE (or -w - for stdout)")
	}
	var err error
	if cfg.Since, cfg.Until, err = parseRange(f.since, f.until, now); err != nil {
		return cfg, err
	}
	cfg.Logger = warnLogger(stderr)
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	return cfg, nil
}

// parseRange reads --since and --until (query.ParseTime, relative to
// now); a flag not given is the zero time.
func parseRange(since, until string, now time.Time) (s, u time.Time, err error) {
	for _, t := range []struct {
		flag, v string
		dst     *time.Time
	}{{"since", since, &s}, {"until", until, &u}} {
		if t.v == "" {
			continue
		}
		v, err := query.ParseTime(t.v, now)
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
	w, closeOut := s.stdout, func() error { return nil }
	if f.out != "-" {
		out, err := os.Create(f.out)
		if err != nil {
			return fmt.Errorf("-w: %w", err)
		}
		w, closeOut = out, out.Close
	}
	res, err := q.Run(ctx, w)
	err = errors.Join(err, closeOut())
	if perr := f.summary.print(s.stderr, querySummary{res}); err == nil {
		err = perr
	}
	return err
}

// runRemoteQuery runs the query on the server at --from and writes
// what it streams.
func runRemoteQuery(ctx context.Context, s streams, f *queryFlags) error {
	switch {
	case f.cfg.Dir != "":
		return usageError("--dir and --from exclude each other (--from queries the server's own root)")
	case f.out == "":
		return usageError("query needs -w FILE (or -w - for stdout)")
	}
	log := slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cc := queryhttp.ClientConfig{Addr: f.from, Params: queryhttp.Params{Agents: f.cfg.Agents, Ifaces: f.cfg.Ifaces,
		Since: f.since, Until: f.until, Filter: f.cfg.Filter, Count: f.cfg.Count, MaxBytes: f.cfg.MaxBytes}}
	var err error
	if cc.TLS, cc.Token, err = f.tls.config(log); err != nil {
		return err
	}
	w, closeOut := s.stdout, func() error { return nil }
	if f.out != "-" {
		out, err := os.Create(f.out)
		if err != nil {
			return fmt.Errorf("-w: %w", err)
		}
		w, closeOut = out, out.Close
	}
	res, err := queryhttp.Fetch(ctx, cc, w)
	streamed := err == nil || errors.Is(err, queryhttp.ErrFailed) // not refused
	err = errors.Join(err, closeOut())
	if errors.Is(err, queryhttp.ErrBadRequest) {
		err = fmt.Errorf("%w: %w", errUsage, err)
	}
	if !streamed {
		return err
	}
	if perr := f.summary.print(s.stderr, querySummary{res}); err == nil {
		err = perr
	}
	return err
}

// querySummary is the query's summary, on stderr (stdout may be the
// pcapng); its JSON is query.Result's.
type querySummary struct {
	query.Result
}

func (q querySummary) writeText(w io.Writer) error {
	_, err := fmt.Fprintln(w, "pcapsync query:", q.Result)
	return err
}
