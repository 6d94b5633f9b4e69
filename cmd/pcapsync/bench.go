//go:build lab

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/pcapsync/pcapsync/internal/bench"
	"github.com/pcapsync/pcapsync/internal/gen"
)

func benchCommand(s streams) *cobra.Command {
	return group("bench", "measure throughput, fan-in, latency and live capture",
		benchTransportCommand(s), benchFaninCommand(s), benchLatencyCommand(s), benchPipelineCommand(s), benchLiveCommand(s), benchKafkaCommand(s), benchKafkaScaleCommand(s), benchQueryCommand(s))
}

func benchLatencyCommand(s streams) *cobra.Command {
	return leaf("latency [--rate PPS] [--seconds N] [--flush-interval D] [--markdown]", "time from capture to readable in the file (root)",
		"Sends packets across a veth between two namespaces it creates, captures them with an agent into a collector, and measures the time from each packet's capture timestamp to its being readable in the file.", noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.LatencyConfig
			fs.IntVar(&c.Rate, "rate", 1000, "packets per second through the veth")
			secs := fs.Float64("seconds", 10, "sending time")
			fs.DurationVar(&c.Flush, "flush-interval", 50*time.Millisecond, "the agent's --flush-interval")
			collArgs := fs.String("collector-args", "", "more collector flags, space-separated (e.g. \"--fsync never\")")
			md := fs.Bool("markdown", false, "print a Markdown table")
			return func(ctx context.Context, _ []string) error {
				if c.Rate < 1 || *secs <= 0 || c.Flush <= 0 {
					return usageError("--rate, --seconds and --flush-interval must be positive")
				}
				c.Duration = time.Duration(*secs * float64(time.Second))
				c.CollectorArgs = strings.Fields(*collArgs)
				var err error
				if c.Exe, err = os.Executable(); err != nil {
					return err
				}
				res, err := bench.Latency(ctx, c)
				if err != nil {
					return err
				}
				fmt.Fprintf(s.stdout, "%d packets/s for %gs over a veth between two namespaces; time from capture timestamp to readable in the file, polled every %v:\n\n", c.Rate, *secs, res.PollEvery)
				return bench.WriteLatency(s.stdout, res, *md)
			}
		})
}

func benchTransportCommand(s streams) *cobra.Command {
	return leaf("transport [--seconds N] [--rounds R] [--markdown]", "messages per second over loopback TCP and UDP",
		"Sends 85-byte messages in wire batch frames over loopback TCP and UDP to a receiver in this process, in several modes, and reports medians.", noArgs, func(fs *pflag.FlagSet) runFunc {
			secs := fs.Float64("seconds", 1, "sending time per mode and round")
			rounds := fs.Int("rounds", 3, "rounds; every mode runs once per round, medians are reported")
			md := fs.Bool("markdown", false, "print a Markdown table")
			return func(ctx context.Context, _ []string) error {
				if *secs <= 0 || *rounds < 1 {
					return usageError("--seconds must be positive and --rounds at least 1")
				}
				res, err := bench.Transport(ctx, bench.TransportConfig{Duration: time.Duration(*secs * float64(time.Second)), Rounds: *rounds})
				if err != nil {
					return err
				}
				fmt.Fprintf(s.stdout, "85-byte messages over loopback, wire batch frames, %d rounds of %gs per mode, receiver in process:\n\n", *rounds, *secs)
				return bench.WriteTransport(s.stdout, res, *md)
			}
		})
}

func benchFaninCommand(s streams) *cobra.Command {
	return leaf("fanin [--agents N] [--rate PPS] [--size BYTES] [--seconds N] [--markdown] [--cpuprofile FILE]", "one collector, many simulated agents",
		"Runs one collector and many simulated agents, each with its own loopback TCP connection, in this process, and reports what was connected, sent and written.", noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.FaninConfig
			fs.IntVar(&c.Agents, "agents", 10000, "simulated agents, each with its own TCP connection")
			fs.IntVar(&c.Rate, "rate", 10, "packets per second per agent (one per batch)")
			fs.IntVar(&c.Size, "size", 100, "bytes per packet")
			secs := fs.Float64("seconds", 10, "sending time once every agent is connected")
			fs.StringVar(&c.Dir, "dir", "", "collector output directory (default: a temporary one, removed afterwards)")
			md := fs.Bool("markdown", false, "print a Markdown table")
			prof := fs.String("cpuprofile", "", "write a CPU profile of the sending window to `FILE` (labels side=collector|agent: go tool pprof -tags FILE; with --collector-process, the collector's alone)")
			sep := fs.Bool("collector-process", false, "run the collector as a child process (this binary's collector subcommand, default --max-open-files) instead of in this process: each process then needs a descriptor per agent, not three, and the collector's CPU and memory are measured alone")
			return func(ctx context.Context, _ []string) error {
				if c.Agents < 1 || c.Rate < 1 || c.Size < 1 || *secs <= 0 {
					return usageError("--agents, --rate, --size and --seconds must be positive")
				}
				if *prof != "" {
					f, err := os.Create(*prof)
					if err != nil {
						return err
					}
					defer f.Close()
					c.CPUProfile = f
				}
				c.Duration = time.Duration(*secs * float64(time.Second))
				where := "in this process"
				if *sep {
					exe, err := os.Executable()
					if err != nil {
						return err
					}
					c.CollectorCommand = []string{exe, "collector"}
					where = "the collector in a child process"
				}
				res, err := bench.Fanin(ctx, c)
				if err != nil {
					if res.Connected > 0 {
						bench.WriteFanin(s.stdout, c, res, *md)
					}
					return err
				}
				fmt.Fprintf(s.stdout, "one collector and %d simulated agents, %s, loopback TCP, --insecure, fsync never:\n\n", c.Agents, where)
				return bench.WriteFanin(s.stdout, c, res, *md)
			}
		})
}

const benchPipelineUsage = `Replays a generated file through agent -> collector -> pcapng, through
PCAP-over-IP (tcpdump -r F -w - | nc into nc -l > file) and through
tcpdump -w then rsync, and through the copy floor (the same bytes over
one loopback TCP connection into a file, nothing parsed), every process
on its own, the methods alternating, and reports medians of packets/s,
CPU and peak RSS per process and bytes written, the ratios, issue 4's
goals and the pipeline against the floor (issue 30). Needs tcpdump, nc
and rsync. Prints every round on stderr as it goes.`

func benchPipelineCommand(s streams) *cobra.Command {
	return leaf("pipeline [--packets N] [--mix 64,imix] [--rounds R] [--markdown] [--keep DIR] [--collector-args ARGS] [--vs-collector-args ARGS] [--exe FILE] [--vs-exe FILE]", "agent -> collector -> pcapng against tcpdump, nc, rsync and the copy floor, or two collector configurations or binaries",
		benchPipelineUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.PipelineConfig
			fs.IntVar(&c.Packets, "packets", 1000000, "packets per input file")
			mixes := fs.String("mix", "64,imix", "packet mixes, comma-separated: 64, imix (64/576/1500 bytes at 7:4:1), mixed")
			exe := fs.String("exe", "", "the pcapsync binary to run (default: this one)")
			fs.IntVar(&c.Rounds, "rounds", 5, "rounds; every method runs once per round, medians are reported")
			md := fs.Bool("markdown", false, "print Markdown tables")
			fs.StringVar(&c.Dir, "keep", "", "work in `DIR` and keep it: the inputs and the last round's outputs (default: a temporary directory, removed)")
			collArgs := fs.String("collector-args", "", "more collector flags, space-separated (e.g. \"--fsync never\"), after --insecure")
			vsArgs := fs.String("vs-collector-args", "", "compare two collector configurations in one run: only pcapsync (twice per round, with --collector-args and with these instead) and the copy floor run")
			fs.StringVar(&c.VsExe, "vs-exe", "", "compare two pcapsync binaries in one run: as --vs-collector-args, the second run of each round with this `FILE`")
			agentArgs := fs.String("agent-args", "", "more agent flags, space-separated (e.g. \"--batch-size 256K --compress s2\")")
			fs.Var(sizeFlag{&c.MemoryLimit}, "memory-limit", "run in a memory cgroup of this SIZE, page cache included (root): the steady state of a full page cache, where writing reclaims (default: none)")
			return func(ctx context.Context, _ []string) error {
				if c.Packets < 1 || c.Rounds < 1 {
					return usageError("--packets and --rounds must be at least 1")
				}
				c.Mixes = splitMixes(*mixes)
				c.CollectorArgs = strings.Fields(*collArgs)
				c.VsCollectorArgs = strings.Fields(*vsArgs)
				c.AgentArgs = strings.Fields(*agentArgs)
				var err error
				if c.Exe, err = benchExe(*exe); err != nil {
					return err
				}
				c.Log = s.stderr
				res, err := bench.Pipeline(ctx, c)
				return printBench(s.stdout, len(res) > 0, err, func() error { return bench.WritePipeline(s.stdout, c, res, *md) })
			}
		})
}

// printBench prints a bench's tables with write when it has results
// (after an error too: the rounds done so far), and returns the bench's
// error or else write's.
func printBench(stdout io.Writer, have bool, err error, write func() error) error {
	if have {
		fmt.Fprintln(stdout)
		if werr := write(); err == nil {
			err = werr
		}
	}
	return err
}

// benchExe returns the pcapsync binary a bench runs: flagValue when
// given, else this executable.
func benchExe(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	return os.Executable()
}

const benchLiveUsage = `Sends UDP as fast as the generator can (or at --rate) across a veth
between two network namespaces it creates and deletes, captures the
receiving end with the pcapsync agent (into a collector there) and with
tcpdump -w at the same time, and reports packets captured, kernel drops
and CPU for both, medians of the rounds, and issue 4's live goal. Prints
every round on stderr as it goes.`

func benchLiveCommand(s streams) *cobra.Command {
	return leaf("live [--seconds S] [--rounds R] [--mix 64,imix] [--rate PPS] [--generators N] [--markdown] [--agent-args ARGS] [--tcpdump-args ARGS] [--exe FILE]", "live capture against tcpdump -w on a veth (root)",
		benchLiveUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.LiveConfig
			secs := fs.Float64("seconds", 5, "sending time per round")
			fs.IntVar(&c.Rounds, "rounds", 3, "rounds per mix; medians are reported")
			mixes := fs.String("mix", "64,imix", "packet mixes, comma-separated: 64, imix (64/576/1500-byte frames at 7:4:1)")
			exe := fs.String("exe", "", "the pcapsync binary to run (default: this one)")
			fs.IntVar(&c.Rate, "rate", 0, "packets per second per generator; 0 is as fast as it can")
			fs.IntVar(&c.Generators, "generators", runtime.NumCPU(), "generator processes (default: one per CPU, the most this machine can send)")
			md := fs.Bool("markdown", false, "print Markdown tables")
			agentArgs := fs.String("agent-args", "", "more agent flags, space-separated (e.g. \"--ring-size 64M\")")
			tdArgs := fs.String("tcpdump-args", "", "more tcpdump flags, space-separated (e.g. \"-B 32768\")")
			return func(ctx context.Context, _ []string) error {
				if *secs <= 0 || c.Rounds < 1 || c.Rate < 0 || c.Generators < 1 {
					return usageError("--seconds must be positive, --rounds and --generators at least 1, --rate not negative")
				}
				c.Duration = time.Duration(*secs * float64(time.Second))
				c.Mixes = splitMixes(*mixes)
				c.AgentArgs, c.TcpdumpArgs = strings.Fields(*agentArgs), strings.Fields(*tdArgs)
				var err error
				if c.Exe, err = benchExe(*exe); err != nil {
					return err
				}
				c.Log = s.stderr
				res, err := bench.Live(ctx, c)
				return printBench(s.stdout, len(res) > 0, err, func() error { return bench.WriteLive(s.stdout, c, res, *md) })
			}
		})
}

// splitMixes reads a comma-separated --mix.
func splitMixes(s string) []gen.Mix {
	var mixes []gen.Mix
	for m := range strings.SplitSeq(s, ",") {
		mixes = append(mixes, gen.Mix(strings.TrimSpace(m)))
	}
	return mixes
}

const benchKafkaUsage = `Replays one generated IMIX file, the paths alternating round by round,
through the direct path (agent -> collector -> files), the Kafka path
(agent -> ingest collector -> broker -> writer -> files), the same with
the agent producing straight to Kafka (agent --kafka -> broker -> writer
-> files) and Kafka's own ProducerPerformance (kafka-tools) with the Kafka path's record size and
acks=all into the same broker; checks every packet reached the files
exactly once; then, as root, measures the latency of both paths at
--latency-rate with two agents capturing lo. Reports packets/s, MB/s,
CPU per million packets of every process (the broker's apart) and issue
15's goals. Starts a single-node broker from scripts/kafka.sh's jars
(Java needed) unless --kafka is given. Prints every round on stderr.`

func benchKafkaCommand(s streams) *cobra.Command {
	return leaf("kafka [--packets N] [--rounds R] [--kafka BROKERS] [--latency-seconds S] [--markdown]", "the Kafka path against the direct path and Kafka's ProducerPerformance",
		benchKafkaUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.KafkaConfig
			fs.IntVar(&c.Packets, "packets", 1000000, "packets in the IMIX input file")
			fs.IntVar(&c.Rounds, "rounds", 3, "rounds; every path runs once per round, medians are reported")
			brokers := fs.String("kafka", "", "use these brokers (comma-separated HOST:PORT, plain TCP) instead of starting one; the broker's CPU is then not reported")
			fs.Int32Var(&c.Partitions, "partitions", 1, "partitions of each round's topic")
			fs.IntVar(&c.PerfBatch, "perf-batch", 1<<20, "ProducerPerformance's batch.size")
			fs.IntVar(&c.LatencyRate, "latency-rate", 1000, "packets per second of the latency run")
			lsecs := fs.Float64("latency-seconds", 10, "sending time of the latency run; 0 skips it")
			fs.DurationVar(&c.Flush, "flush-interval", 50*time.Millisecond, "the latency agents' --flush-interval")
			fs.DurationVar(&c.Settle, "settle", 5*time.Second, "pause before every round, so that a VM's host has taken back the pages the last round freed (0: none)")
			exe := fs.String("exe", "", "the pcapsync binary to run (default: this one)")
			fs.StringVar(&c.Dir, "keep", "", "work in `DIR` and keep it (default: a temporary directory, removed)")
			md := fs.Bool("markdown", false, "print Markdown tables")
			return func(ctx context.Context, _ []string) error {
				if c.Packets < 1 || c.Rounds < 1 || c.Partitions < 1 || c.PerfBatch < 1 || c.LatencyRate < 1 || *lsecs < 0 || c.Flush <= 0 || c.Settle < 0 {
					return usageError("--packets, --rounds, --partitions, --perf-batch, --latency-rate and --flush-interval must be positive, --latency-seconds and --settle not negative")
				}
				if c.Settle == 0 {
					c.Settle = -1
				}
				c.LatencyDuration = time.Duration(*lsecs * float64(time.Second))
				if *lsecs == 0 {
					c.LatencyDuration = -1
				}
				c.Brokers = splitList(*brokers)
				var err error
				if c.Exe, err = benchExe(*exe); err != nil {
					return err
				}
				c.Log = s.stderr
				res, err := bench.Kafka(ctx, c)
				return printBench(s.stdout, len(res.Kafka) > 0 || len(res.Direct.Runs) > 0, err, func() error { return bench.WriteKafka(s.stdout, c, res, *md) })
			}
		})
}

const benchKafkaScaleUsage = `Runs --agents agents, each replaying a generated IMIX file under its
own name, through --ingest ingest collectors into a fresh topic of
--partitions partitions, written by 1, then 2, then 3 writers (--writers)
of one group on one root, and reports per writer the partitions held,
packets and bytes written and CPU, and whether the spread is even;
checks every agent's packets are in the files exactly once. Starts a
single-node broker from scripts/kafka.sh's jars unless --kafka is given.`

func benchKafkaScaleCommand(s streams) *cobra.Command {
	return leaf("kafka-scale [--agents N] [--packets N] [--partitions P] [--writers 1,2,3] [--ingest N] [--kafka BROKERS] [--markdown]", "1, 2, 3 writers of one group sharing a topic's partitions",
		benchKafkaScaleUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.KafkaScaleConfig
			fs.IntVar(&c.Agents, "agents", 24, "agents, each replaying its own copy under its own name")
			fs.IntVar(&c.Packets, "packets", 20000, "packets per agent (IMIX)")
			fs.Int32Var(&c.Partitions, "partitions", 12, "partitions of the topic")
			fs.IntSliceVar(&c.Writers, "writers", []int{1, 2, 3}, "writer counts, one run each")
			fs.IntVar(&c.Ingest, "ingest", 2, "ingest collectors")
			brokers := fs.String("kafka", "", "use these brokers (comma-separated HOST:PORT, plain TCP) instead of starting one")
			exe := fs.String("exe", "", "the pcapsync binary to run (default: this one)")
			fs.StringVar(&c.Dir, "keep", "", "work in `DIR` and keep it (default: a temporary directory, removed)")
			md := fs.Bool("markdown", false, "print Markdown tables")
			return func(ctx context.Context, _ []string) error {
				if c.Agents < 1 || c.Packets < 1 || c.Partitions < 1 || c.Ingest < 1 || len(c.Writers) == 0 || slices.Min(c.Writers) < 1 {
					return usageError("--agents, --packets, --partitions, --ingest and every --writers count must be at least 1")
				}
				c.Brokers = splitList(*brokers)
				var err error
				if c.Exe, err = benchExe(*exe); err != nil {
					return err
				}
				c.Log = s.stderr
				res, err := bench.KafkaScale(ctx, c)
				return printBench(s.stdout, len(res.Runs) > 0, err, func() error { return bench.WriteKafkaScale(s.stdout, res, *md) })
			}
		})
}

const benchQueryUsage = `Makes an output root of --bytes of captures from --agents agents, as
the collector writes it (plain pcapng, an index beside every file; IMIX
TCP and UDP flows between each agent and many peers, over --span of
packet time), or reuses the one in --keep DIR made for the same
settings. Then runs two queries side by side, the sides alternating,
--rounds times each after one unmeasured run of every side: one host
(under 0.1% of the packets) over the whole time, and TCP in one minute;
each with pcapsync query, pcapsync query --no-index and mergecap of
every data file piped into tcpdump (through editcap -A/-B for the
minute). Then the export, every packet into one file: pcapsync query
-w, mergecap -w and cat of the files (the floor of reading and writing
them), the filesystem synced before each run. Reports medians of wall
time, ratios, CPU, bytes read (/proc/PID/io), peak RSS and packets,
issue 16's goals and issue 30's export goals (the medians of the
rounds' paired ratios); fails when a side's output does not hold the
packets the others' do. Needs mergecap, editcap and tcpdump. Prints
every run on stderr as it goes.`

func benchQueryCommand(s streams) *cobra.Command {
	return leaf("query [--bytes 2G] [--agents 8] [--rounds R] [--markdown] [--keep DIR] [--cold] [--exe FILE]", "pcapsync query against mergecap | tcpdump, and exports against mergecap -w and cat, on many agents' files",
		benchQueryUsage, noArgs, func(fs *pflag.FlagSet) runFunc {
			var c bench.QueryConfig
			c.Bytes = 2 << 30
			fs.Var(sizeFlag{&c.Bytes}, "bytes", "bytes of data files in the output root (e.g. 2G)")
			fs.IntVar(&c.Agents, "agents", 8, "agents, each its own directory of files")
			fs.DurationVar(&c.Span, "span", 10*time.Minute, "packet time the root spans (the broad query takes one minute of it)")
			c.Rotate = 64 << 20
			fs.Var(sizeFlag{&c.Rotate}, "rotate-size", "the store's file rotation size")
			fs.IntVar(&c.Rounds, "rounds", 3, "rounds; every side of each query runs once per round, medians are reported")
			fs.BoolVar(&c.Cold, "cold", false, "drop the page cache before every measured run instead of warming (root)")
			exe := fs.String("exe", "", "the pcapsync binary to run (default: this one)")
			fs.StringVar(&c.Dir, "keep", "", "work in `DIR` and keep it; its output root is reused when made for the same --bytes, --agents, --span and --rotate-size (default: a temporary directory, removed)")
			md := fs.Bool("markdown", false, "print Markdown tables")
			return func(ctx context.Context, _ []string) error {
				if c.Bytes < 1<<20 || c.Agents < 1 || c.Span < 2*time.Minute || c.Rounds < 1 || c.Rotate < 4096 {
					return usageError("--bytes must be at least 1M, --agents and --rounds at least 1, --span at least 2m, --rotate-size at least 4K")
				}
				var err error
				if c.Exe, err = benchExe(*exe); err != nil {
					return err
				}
				c.Log = s.stderr
				res, err := bench.Query(ctx, c)
				return printBench(s.stdout, len(res.Cases) > 0, err, func() error { return bench.WriteQuery(s.stdout, c, res, *md) })
			}
		})
}
