package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pcapsync/pcapsync/internal/bench"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "transport" && args[0] != "fanin" && args[0] != "latency") {
		return fmt.Errorf("%w: bench transport|fanin|latency [flags]", errUsage)
	}
	switch args[0] {
	case "latency":
		var err error
		fs := newFlagSet("bench latency", "pcapsync bench latency [--rate PPS] [--seconds N] [--flush-interval D] [--markdown]  (root)", stderr)
		var c bench.LatencyConfig
		fs.IntVar(&c.Rate, "rate", 1000, "packets per second through the veth")
		secs := fs.Float64("seconds", 10, "sending time")
		fs.DurationVar(&c.Flush, "flush-interval", 50*time.Millisecond, "the agent's --flush-interval")
		md := fs.Bool("markdown", false, "print a Markdown table")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if c.Rate < 1 || *secs <= 0 || c.Flush <= 0 {
			return fmt.Errorf("%w: --rate, --seconds and --flush-interval must be positive", errUsage)
		}
		c.Duration = time.Duration(*secs * float64(time.Second))
		if c.Exe, err = os.Executable(); err != nil {
			return err
		}
		res, err := bench.Latency(ctx, c)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d packets/s for %gs over a veth between two namespaces; time from capture timestamp to readable in the file, polled every %v:\n\n", c.Rate, *secs, res.PollEvery)
		return bench.WriteLatency(stdout, res, *md)
	case "transport":
		fs := newFlagSet("bench transport", "pcapsync bench transport [--seconds N] [--rounds R] [--markdown]", stderr)
		secs := fs.Float64("seconds", 1, "sending time per mode and round")
		rounds := fs.Int("rounds", 3, "rounds; every mode runs once per round, medians are reported")
		md := fs.Bool("markdown", false, "print a Markdown table")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *secs <= 0 || *rounds < 1 {
			return fmt.Errorf("%w: --seconds must be positive and --rounds at least 1", errUsage)
		}
		res, err := bench.Transport(ctx, bench.TransportConfig{Duration: time.Duration(*secs * float64(time.Second)), Rounds: *rounds})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "85-byte messages over loopback, wire batch frames, %d rounds of %gs per mode, receiver in process:\n\n", *rounds, *secs)
		return bench.WriteTransport(stdout, res, *md)
	case "fanin":
		fs := newFlagSet("bench fanin", "pcapsync bench fanin [--agents N] [--rate PPS] [--size BYTES] [--seconds N] [--markdown] [--cpuprofile FILE]", stderr)
		var c bench.FaninConfig
		fs.IntVar(&c.Agents, "agents", 10000, "simulated agents, each with its own TCP connection")
		fs.IntVar(&c.Rate, "rate", 10, "packets per second per agent (one per batch)")
		fs.IntVar(&c.Size, "size", 100, "bytes per packet")
		secs := fs.Float64("seconds", 10, "sending time once every agent is connected")
		fs.StringVar(&c.Dir, "dir", "", "collector output directory (default: a temporary one, removed afterwards)")
		md := fs.Bool("markdown", false, "print a Markdown table")
		prof := fs.String("cpuprofile", "", "write a CPU profile of the sending window to `FILE` (labels side=collector|agent: go tool pprof -tags FILE)")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *prof != "" {
			f, err := os.Create(*prof)
			if err != nil {
				return err
			}
			defer f.Close()
			c.CPUProfile = f
		}
		if c.Agents < 1 || c.Rate < 1 || c.Size < 1 || *secs <= 0 {
			return fmt.Errorf("%w: --agents, --rate, --size and --seconds must be positive", errUsage)
		}
		c.Duration = time.Duration(*secs * float64(time.Second))
		res, err := bench.Fanin(ctx, c)
		if err != nil {
			if res.Connected > 0 {
				bench.WriteFanin(stdout, c, res, *md)
			}
			return err
		}
		fmt.Fprintf(stdout, "one collector and %d simulated agents in this process, loopback TCP, --insecure, fsync never:\n\n", c.Agents)
		return bench.WriteFanin(stdout, c, res, *md)
	}
	return nil
}
