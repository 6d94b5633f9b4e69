package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

const correlateUsage = `Answers "where was it lost?": reads the packets of two or more agents
(capture points on a path) below an output root, for the same range and
filter, matches each packet seen at one with the same packet at the
others by the bytes that do not change on the way (addresses, protocol,
IP id, ports, TCP sequence and acknowledgement, ICMP id and sequence, a
hash of the payload; not TTL, checksums, DSCP/ECN or the link header),
and prints per pair of agents, in the order given: the packets at each,
matched, seen at one and never at the other, duplicates, and the
one-way delay (min, p50, p90, p99, max of tTo - tFrom). The delay is
measured on two clocks: it includes their offset and can be negative.

Two sightings match only within --window of each other; a packet not
seen at the other agent within it counts as never seen there. -w writes
those packets as pcapng, each on its agent:iface. --agent takes exact
names; --iface, --since, --until and FILTER select as for pcapsync query.
docs/correlate.md explains the matching and the memory it takes.

--from A,B,C (and --servers FILE) reads the agents' packets from the
query listeners of collectors and writers (their --query-listen: GET
/query, with the TLS flags, --token-file or --insecure as query --from)
instead of --dir: every server is asked for the agents at once and
their answers merged in time order, an agent held by several servers
(after a failover) its packets from all of them. A server that fails,
or sends nothing for --server-timeout, fails the correlation, naming
it: a server missing would count its packets as lost.`

type correlateFlags struct {
	cfg          correlate.Config
	since, until string
	out          string
	asJSON       bool
	srv          serverFlags
}

func correlateCommand(s streams) *cobra.Command {
	c := leaf("correlate (--dir DIR | --from HOST:PORT[,HOST:PORT...] [--servers FILE] [--server-timeout D] [TLS flags | --insecure]) --agent A --agent B [--agent C] [--since T] [--until T] [--window D] [-w UNMATCHED] [--json] [FILTER]",
		"match the packets of capture points on a path: what was lost between them, duplicated, and the delay",
		correlateUsage, cobra.ArbitraryArgs, func(fs *pflag.FlagSet) runFunc {
			f := &correlateFlags{}
			fs.StringVar(&f.cfg.Dir, "dir", "", "the output root to read (required)")
			fs.StringSliceVar(&f.cfg.Agents, "agent", nil, "the agents to correlate, two or more, by name, repeated or comma-separated (required)")
			fs.StringSliceVar(&f.cfg.Ifaces, "iface", nil, "only these interfaces: AGENT:IF or IF, names or globs (default: all)")
			fs.StringVar(&f.since, "since", "", "the first time included: RFC 3339, a duration back from now (10m) or Unix seconds")
			fs.StringVar(&f.until, "until", "", "the first time excluded, as --since")
			fs.StringVar(&f.cfg.Filter, "filter", "", "tcpdump-syntax filter (or give it as the trailing arguments)")
			f.cfg.Window = correlate.DefaultWindow
			fs.DurationVar(&f.cfg.Window, "window", correlate.DefaultWindow, "how far apart two sightings of a packet may be (path delay plus the clocks' offset); memory grows with it")
			f.cfg.ReorderMem = query.DefaultReorderMem
			fs.Var(sizeFlag{&f.cfg.ReorderMem}, "reorder-mem", "memory that puts each agent's packets in timestamp order, shared by the agents read")
			fs.StringVarP(&f.out, "write", "w", "", "write the packets seen at one agent and never at another to this pcapng file (- for stdout, then the report goes to stderr)")
			fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object")
			f.srv.defineFrom(fs, "packets")
			f.srv.defineTimeout(fs)
			return func(ctx context.Context, args []string) error {
				if err := filterArgs(fs, args, &f.cfg.Filter); err != nil {
					return err
				}
				if err := f.srv.check(fs); err != nil {
					return err
				}
				return runCorrelate(ctx, s, f)
			}
		})
	annotate(c.Flags(), "filter", annPositional)
	return c
}

// config checks the flags and fills the correlation's Config.
func (f *correlateFlags) config(now time.Time, stderr io.Writer) (correlate.Config, error) {
	cfg := f.cfg
	switch {
	case f.srv.given() && cfg.Dir != "":
		return cfg, usageError("--dir and --from exclude each other (--from reads the servers' own roots)")
	case !f.srv.given() && cfg.Dir == "":
		return cfg, usageError("correlate needs --dir (or --from)")
	}
	var err error
	if cfg.Since, cfg.Until, err = parseRange(f.since, f.until, now); err != nil {
		return cfg, err
	}
	cfg.Logger = warnLogger(stderr)
	validate := cfg.Validate
	if f.srv.given() {
		validate = cfg.ValidateAgents // the servers check the selection
	}
	if err := validate(); err != nil {
		return cfg, fmt.Errorf("%w: %w", errUsage, err)
	}
	return cfg, nil
}

func runCorrelate(ctx context.Context, s streams, f *correlateFlags) error {
	cfg, err := f.config(time.Now(), s.stderr)
	if err != nil {
		return err
	}
	report := s.stdout
	var w io.Writer
	closeOut := func() error { return nil }
	switch f.out {
	case "":
	case "-":
		w, report = s.stdout, s.stderr
	default:
		out, err := os.Create(f.out)
		if err != nil {
			return fmt.Errorf("-w: %w", err)
		}
		w, closeOut = out, out.Close
	}
	rep, err := f.correlate(ctx, cfg, w, s.stderr)
	if errors.Is(err, correlate.ErrNoAgent) || errors.Is(err, query.ErrBadFilter) {
		err = fmt.Errorf("%w: %w", errUsage, err)
	}
	if err = errors.Join(err, closeOut()); err != nil {
		return err
	}
	if f.asJSON {
		return json.NewEncoder(report).Encode(rep)
	}
	return rep.WriteTable(report)
}

// correlate runs the correlation over --dir, or over the servers of
// --from.
func (f *correlateFlags) correlate(ctx context.Context, cfg correlate.Config, w, stderr io.Writer) (correlate.Report, error) {
	if !f.srv.given() {
		return correlate.Run(ctx, cfg, w)
	}
	ccs, err := f.srv.clients(stderr)
	if err != nil {
		return correlate.Report{}, err
	}
	p := queryhttp.Params{Agents: cfg.Agents, Ifaces: cfg.Ifaces, Filter: cfg.Filter}
	now := time.Now()
	if p.Since, err = remoteTime("since", f.since, now); err != nil {
		return correlate.Report{}, err
	}
	if p.Until, err = remoteTime("until", f.until, now); err != nil {
		return correlate.Report{}, err
	}
	for i := range ccs {
		ccs[i].Params = p
	}
	return correlate.RunSource(ctx, cfg, &remoteSource{ccs: ccs, timeout: f.srv.timeout}, w)
}
