package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// KafkaConfig describes a run of the Kafka path against the direct path
// and Kafka's ProducerPerformance. The zero value of each field but Exe
// means its default.
type KafkaConfig struct {
	Exe     string   // the pcapsync binary to run; required
	Packets int      // packets in the IMIX input file; 0 means 1 000 000
	Rounds  int      // 0 means 3
	Brokers []string // bootstrap brokers of a Kafka to use; nil: start one (kafkatest), whose CPU is then measured
	// Partitions of each round's topic, the Kafka path's and
	// ProducerPerformance's alike; 0 means 1 (the one agent's records
	// go to one partition whatever the count).
	Partitions int32
	// PerfBatch is ProducerPerformance's batch.size; 0 means 1 MiB.
	PerfBatch int
	// LatencyRate is the packets per second of the latency run; 0
	// means 1000. LatencyDuration is its sending time: 0 means 10 s, a
	// negative one skips the run. The run needs root (capture on lo).
	LatencyRate     int
	LatencyDuration time.Duration
	Flush           time.Duration // the latency agents' --flush-interval; 0 means 50ms
	// Settle is the pause before every round, so that the pages the
	// last one freed are returned to a VM's host before the next one
	// writes (freshPages); 0 means 5 s, a negative one none.
	Settle time.Duration
	Dir    string    // work directory, kept afterwards; "" means a temporary one, removed
	Log    io.Writer // every round's figures as they come; nil means none
}

func (c KafkaConfig) withDefaults() KafkaConfig {
	if c.Packets == 0 {
		c.Packets = 1_000_000
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if c.Partitions == 0 {
		c.Partitions = 1
	}
	if c.PerfBatch == 0 {
		c.PerfBatch = 1 << 20
	}
	if c.LatencyRate == 0 {
		c.LatencyRate = 1000
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = 10 * time.Second
	}
	if c.Flush == 0 {
		c.Flush = 50 * time.Millisecond
	}
	if c.Settle == 0 {
		c.Settle = 5 * time.Second
	}
	return c
}

// The paths a Kafka run compares, in the order of its rounds.
const (
	PathDirect     = "direct"
	PathKafka      = "kafka"       // through an ingest collector
	PathKafkaAgent = "kafka-agent" // agents straight to Kafka
	PathProducer   = "ProducerPerformance"
)

// KafkaRun is one round of a Kafka path: agent -> ingest collector ->
// broker -> writer -> files, or agent -> broker -> writer -> files.
type KafkaRun struct {
	// Wall is from the agent's start to the writers' group having
	// committed every record (lag 0: everything in files); Procs are
	// the agent, the ingest collector (if any) and the writer.
	PipelineRun
	Ingest      time.Duration // the agent's start to its exit, every packet acknowledged: in Kafka
	Records     int64         // records the writer consumed (all there were: lag 0)
	RecordBytes int64         // the bytes of their values
	BrokerCPU   time.Duration // the broker's user + system time over the round; 0 when not measured
	topic       string        // where its records stay until the end (runFloor reads them)
}

// FloorRun is one round of franz-go alone on a Kafka path round's
// records (runFloor): the CPU of reading them all as a writer's group
// member does, dropping them; and of a relay reading them and producing
// each again as the ingest collector does.
type FloorRun struct {
	Records        int
	Bytes          int64
	Consume, Relay time.Duration // this process's user + system time
}

// RecordSize returns the mean record value size.
func (r KafkaRun) RecordSize() float64 {
	if r.Records == 0 {
		return 0
	}
	return float64(r.RecordBytes) / float64(r.Records)
}

// IngestRate returns the record bytes per second into Kafka.
func (r KafkaRun) IngestRate() float64 { return float64(r.RecordBytes) / r.Ingest.Seconds() }

// PerfRun is one round of Kafka's ProducerPerformance into the same
// broker.
type PerfRun struct {
	Records, RecordSize int
	RecordsPerSec       float64   // from its own closing line
	Proc                ProcUsage // the JVM, Wall its whole run (start-up included)
	BrokerCPU           time.Duration
}

// BytesPerSec returns the record bytes per second it reached.
func (r PerfRun) BytesPerSec() float64 { return r.RecordsPerSec * float64(r.RecordSize) }

// KafkaLatency holds the times from capture to readable in a file at
// LatencyRate through both paths at once.
type KafkaLatency struct {
	Flush          time.Duration
	Rate, Sent     int
	Direct, Kafka  []time.Duration // sorted
	PollEvery      time.Duration
	DirectFile     string
	KafkaFile      string
	Skipped, Error string // why there are no figures
}

// KafkaResult is what Kafka measured.
type KafkaResult struct {
	Packets    int
	InputBytes int64
	OwnBroker  bool // the bench started the broker and measured its CPU
	Direct     MethodResult
	Kafka      []KafkaRun // through an ingest collector
	KafkaAgent []KafkaRun // agents straight to Kafka
	Floor      []FloorRun // franz-go alone on the Kafka rounds' records
	Perf       []PerfRun
	Latency    KafkaLatency
}

// kafkaMed is the median over the Kafka rounds of f.
func (r KafkaResult) kafkaMed(f func(KafkaRun) float64) float64 { return medianOf(r.Kafka, f) }

// perfMed is the median over the ProducerPerformance rounds of f.
func (r KafkaResult) perfMed(f func(PerfRun) float64) float64 { return medianOf(r.Perf, f) }

// perM returns d in seconds per million of n packets.
func perM(d time.Duration, n int) float64 { return d.Seconds() * 1e6 / float64(n) }

// KafkaGoals are issue 15's three goals: each ratio and whether it is met.
type KafkaGoals struct {
	// IngestRatio is the Kafka path's record bytes/s into Kafka over
	// ProducerPerformance's (median over median); goal >= 0.7.
	IngestRatio float64
	IngestMet   bool
	// CPURatio is the CPU per packet of the Kafka path's pcapsync
	// processes (agent, ingest collector, writer) over the direct
	// path's (agent, collector); goal <= 1.5.
	CPURatio float64
	CPUMet   bool
	// CPURatioAgent is the same for agents straight to Kafka (agent,
	// writer), when measured.
	CPURatioAgent float64
	CPUMetAgent   bool
	// FloorRatio is the least CPURatio franz-go allows, when measured:
	// the direct path's CPU per packet plus the relay's (reading every
	// record as a writer and producing it as an ingest collector), over
	// the direct path's. The Kafka path does all the direct path does
	// (an agent sending, a process reading its socket and checking its
	// batches, one parsing them and writing files) and the relay's work
	// on top.
	FloorRatio float64
	// LatencyP99 of the Kafka path; goal < Flush + 25 ms.
	LatencyP99, LatencyGoal time.Duration
	LatencyMet              bool
}

// Goals computes KafkaGoals from the medians of the rounds.
func (r KafkaResult) Goals() KafkaGoals {
	var g KafkaGoals
	if len(r.Kafka) > 0 && len(r.Perf) > 0 {
		g.IngestRatio = r.kafkaMed(KafkaRun.IngestRate) / r.perfMed(PerfRun.BytesPerSec)
		g.IngestMet = g.IngestRatio >= 0.7
	}
	if len(r.Kafka) > 0 && len(r.Direct.Runs) > 0 {
		g.CPURatio = r.kafkaMed(func(k KafkaRun) float64 { return perM(k.CPU(), r.Packets) }) / r.Direct.CPUPerM(r.Packets, -1)
		g.CPUMet = g.CPURatio <= 1.5
	}
	if len(r.Floor) > 0 && len(r.Direct.Runs) > 0 {
		d := r.Direct.CPUPerM(r.Packets, -1)
		g.FloorRatio = (d + medianOf(r.Floor, func(f FloorRun) float64 { return perM(f.Relay, r.Packets) })) / d
	}
	if len(r.KafkaAgent) > 0 && len(r.Direct.Runs) > 0 {
		g.CPURatioAgent = medianOf(r.KafkaAgent, func(k KafkaRun) float64 { return perM(k.CPU(), r.Packets) }) / r.Direct.CPUPerM(r.Packets, -1)
		g.CPUMetAgent = g.CPURatioAgent <= 1.5
	}
	g.LatencyGoal = r.Latency.Flush + 25*time.Millisecond
	if len(r.Latency.Kafka) > 0 {
		g.LatencyP99 = percentile(r.Latency.Kafka, 99)
		g.LatencyMet = g.LatencyP99 < g.LatencyGoal
	}
	return g
}

// WriteKafka writes the three paths' table, the latency table and the
// goals.
func WriteKafka(w io.Writer, cfg KafkaConfig, r KafkaResult, markdown bool) error {
	cfg = cfg.withDefaults()
	ew := &errWriter{w: w}
	broker := "a broker given with --kafka (its CPU not measured)"
	if r.OwnBroker {
		broker = "a single-node KRaft broker this bench started (kafkatest: one JVM, -Xmx512m, serial GC, C1 only; log on local disk), its CPU read from /proc/PID/stat before and after each round"
	}
	ew.printf("Input: %s packets of IMIX, %s bytes, read once into the page cache. Kafka: %s; each round a fresh topic of %d partition(s) (max.message.bytes 17 MiB, replication the broker's default). The paths alternate, each round starting with the next one; medians of %d rounds, ratios of medians. CPU is user + system time of each process from wait4. Each path's files are deleted as soon as its round is measured, the topics at the end, and each round starts %v after the last one: no path writes into page cache pages freed a moment before (cheaper on a VM that returns freed pages to its host).\n\n",
		groupDigits(int64(r.Packets)), groupDigits(r.InputBytes), broker, cfg.Partitions, len(r.Kafka), max(cfg.Settle, 0))
	ew.printf("- direct: pcapsync agent --read F -> collector -> pcapng (both --insecure, defaults: --fsync 1s); time to the agent's exit, every packet acknowledged (in a file).\n")
	ew.printf("- kafka: pcapsync agent --read F -> ingest collector (collector --kafka) -> broker -> pcapsync writer -> pcapng (defaults: --fsync 1s); to files: time to the group's committed offsets at the topic's end (lag 0: every record in a file, as durable as --fsync promises); ingest: time to the agent's exit (every packet acknowledged: in Kafka, acks=all). MB/s of the ingest row are record value bytes.\n")
	ew.printf("- kafka, agents straight to Kafka: the same with the agent producing itself (agent --kafka), no ingest collector.\n")
	ew.printf("- franz-go alone, after the rounds, on each Kafka round's records, CPU of the bench's own process (getrusage): a consumer group member as the writer's (from the start, no automatic commits) reading every record and dropping it; then a relay, another member reading them and the ingest collector's producer (idempotent, acks=all) writing each again to a fresh topic. The Kafka path does all the direct path does plus what the relay does, so direct + relay over direct is the least CPU ratio the Kafka path can have on franz-go.\n")
	ew.printf("- ProducerPerformance: Kafka's own tool (org.apache.kafka.tools.ProducerPerformance, kafka-tools of the broker's release), as many records of the Kafka path's mean record size, acks=all, batch.size %d, --throughput -1, into the same broker; its rate from its own closing line, seconds are the JVM's whole run.\n\n",
		cfg.PerfBatch)
	if ew.err == nil {
		ew.err = table(w, kafkaRows(r), markdown)
	}
	ew.printf("\n")
	if l := r.Latency; l.Skipped != "" || l.Error != "" {
		ew.printf("Latency at %d packets/s: not measured: %s%s\n\n", cfg.LatencyRate, l.Skipped, l.Error)
	} else {
		ew.printf("Latency: pcapsync gen udp sends %d packets at %d packets/s to 127.0.0.1; two agents capture them on lo (BPF: udp and dst port P, --flush-interval %v) at once, one into a collector, one into an ingest collector -> broker -> writer; each file is read every %v, and a packet's latency is the time it became readable minus its capture timestamp.\n\n",
			l.Sent, l.Rate, l.Flush, l.PollEvery)
		row := func(name string, ds []time.Duration) []string {
			return []string{name, fmt.Sprint(len(ds)), fmtDur(percentile(ds, 50)), fmtDur(percentile(ds, 99)), fmtDur(percentile(ds, 100))}
		}
		if ew.err == nil {
			ew.err = table(w, [][]string{
				{"capture to readable in a file", "packets", "p50", "p99", "max"},
				row("direct: agent -> collector", l.Direct),
				row("kafka: agent -> ingest -> broker -> writer", l.Kafka),
			}, markdown)
		}
		ew.printf("\n")
	}
	g := r.Goals()
	ew.printf("Goals (issue 15):\n")
	ew.printf("- Kafka path ingest bytes/s >= 0.7x ProducerPerformance's: %s, %s\n", ratioStr(g.IngestRatio, len(r.Kafka) > 0 && len(r.Perf) > 0), metStr(g.IngestMet))
	ew.printf("- pcapsync's processes' CPU per packet, Kafka path <= 1.5x direct (broker apart): %s, %s\n", ratioStr(g.CPURatio, len(r.Kafka) > 0 && len(r.Direct.Runs) > 0), metStr(g.CPUMet))
	if len(r.KafkaAgent) > 0 {
		ew.printf("  - the same with agents straight to Kafka (no ingest collector): %s, %s\n", ratioStr(g.CPURatioAgent, len(r.Direct.Runs) > 0), metStr(g.CPUMetAgent))
	}
	if g.FloorRatio > 0 {
		ew.printf("  - the least franz-go allows through an ingest collector (direct + the relay's CPU, over direct): %.2fx\n", g.FloorRatio)
	}
	lat := "not measured"
	if g.LatencyP99 > 0 {
		lat = fmtDur(g.LatencyP99)
	}
	ew.printf("- Kafka path latency p99 < flush interval + 25 ms = %s: %s, %s\n", fmtDur(g.LatencyGoal), lat, metStr(g.LatencyMet))
	return ew.err
}

func ratioStr(x float64, ok bool) string {
	if !ok {
		return "not measured"
	}
	return fmt.Sprintf("%.2fx", x)
}

// kafkaRows is the table of the three paths and their processes.
func kafkaRows(r KafkaResult) [][]string {
	n := r.Packets
	rows := [][]string{{"path, medians", "packets/s", "MB/s", "seconds", "CPU s per M packets", "user / sys s per M", "peak RSS"}}
	mbps := func(bytes float64, secs float64) string { return fmt.Sprintf("%.1f", bytes/secs/1e6) }
	procRows := func(runs []PipelineRun) {
		if len(runs) == 0 {
			return
		}
		for i, p := range runs[0].Procs {
			cpu := medianOf(runs, func(x PipelineRun) float64 { return perM(x.Procs[i].CPU(), n) })
			user := medianOf(runs, func(x PipelineRun) float64 { return perM(x.Procs[i].User, n) })
			sys := medianOf(runs, func(x PipelineRun) float64 { return perM(x.Procs[i].Sys, n) })
			rss := medianOf(runs, func(x PipelineRun) float64 { return float64(x.Procs[i].MaxRSS) })
			rows = append(rows, []string{"  " + p.Name, "", "", "", fmt.Sprintf("%.3f", cpu), fmt.Sprintf("%.3f / %.3f", user, sys), fmtRSS(int64(rss))})
		}
	}
	if d := r.Direct; len(d.Runs) > 0 {
		secs := d.med(func(x PipelineRun) float64 { return x.Wall.Seconds() })
		rows = append(rows, []string{"direct: agent -> collector -> files", fmtRate(d.PacketRate(n)), mbps(float64(r.InputBytes), secs),
			fmt.Sprintf("%.3f", secs), fmt.Sprintf("%.3f", d.CPUPerM(n, -1)), "", ""})
		procRows(d.Runs)
	}
	kafkaPath := func(label string, ks []KafkaRun) {
		if len(ks) == 0 {
			return
		}
		med := func(f func(KafkaRun) float64) float64 { return medianOf(ks, f) }
		wall := med(func(k KafkaRun) float64 { return k.Wall.Seconds() })
		ing := med(func(k KafkaRun) float64 { return k.Ingest.Seconds() })
		cpu := med(func(k KafkaRun) float64 { return perM(k.CPU(), n) })
		rows = append(rows,
			[]string{label + ": to files (lag 0)", fmtRate(float64(n) / wall), mbps(float64(r.InputBytes), wall), fmt.Sprintf("%.3f", wall), fmt.Sprintf("%.3f", cpu), "", ""},
			[]string{label + ": ingest (all in Kafka)", fmtRate(float64(n) / ing), fmt.Sprintf("%.1f", med(KafkaRun.IngestRate)/1e6), fmt.Sprintf("%.3f", ing), "", "", ""},
			[]string{"  files behind Kafka at the agent's exit", "", "", fmt.Sprintf("%.3f", med(func(k KafkaRun) float64 { return (k.Wall - k.Ingest).Seconds() })), "", "", ""})
		runs := make([]PipelineRun, len(ks))
		for i, k := range ks {
			runs[i] = k.PipelineRun
		}
		procRows(runs)
		if r.OwnBroker {
			rows = append(rows, []string{"  broker (apart)", "", "", "", fmt.Sprintf("%.3f", med(func(k KafkaRun) float64 { return perM(k.BrokerCPU, n) })), "", ""})
		}
		rows = append(rows, []string{fmt.Sprintf("  records: %.0f of %s bytes (mean)", med(func(k KafkaRun) float64 { return float64(k.Records) }),
			groupDigits(int64(med(KafkaRun.RecordSize)))), "", "", "", "", "", ""})
	}
	kafkaPath("kafka", r.Kafka)
	kafkaPath("kafka, agents straight to Kafka", r.KafkaAgent)
	if len(r.Floor) > 0 {
		rows = append(rows,
			[]string{"franz-go alone on the Kafka path's records", "", "", "", "", "", ""},
			[]string{"  a group member reading them, dropping them", "", "", "", fmt.Sprintf("%.3f", medianOf(r.Floor, func(f FloorRun) float64 { return perM(f.Consume, n) })), "", ""},
			[]string{"  a relay: reading them, producing each again", "", "", "", fmt.Sprintf("%.3f", medianOf(r.Floor, func(f FloorRun) float64 { return perM(f.Relay, n) })), "", ""})
	}
	if len(r.Perf) > 0 {
		p0 := r.Perf[0]
		rows = append(rows, []string{fmt.Sprintf("ProducerPerformance: %d records of %s bytes", p0.Records, groupDigits(int64(p0.RecordSize))),
			fmt.Sprintf("%.1f records/s", r.perfMed(func(p PerfRun) float64 { return p.RecordsPerSec })),
			fmt.Sprintf("%.1f", r.perfMed(PerfRun.BytesPerSec)/1e6),
			fmt.Sprintf("%.3f", r.perfMed(func(p PerfRun) float64 { return p.Proc.Wall.Seconds() })), "", "", ""})
		rows = append(rows, []string{"  its JVM (CPU s per run)", "", "", "", fmt.Sprintf("%.3f", r.perfMed(func(p PerfRun) float64 { return p.Proc.CPU().Seconds() })), "",
			fmtRSS(int64(r.perfMed(func(p PerfRun) float64 { return float64(p.Proc.MaxRSS) })))})
		if r.OwnBroker {
			rows = append(rows, []string{"  broker (CPU s per run; per M packets' worth of bytes)", "", "", "",
				fmt.Sprintf("%.3f; %.3f", r.perfMed(func(p PerfRun) float64 { return p.BrokerCPU.Seconds() }), r.perfMed(func(p PerfRun) float64 {
					return p.BrokerCPU.Seconds() * 1e6 / float64(n) * float64(r.InputBytes) / float64(p.Records*p.RecordSize)
				})), "", ""})
		}
	}
	return rows
}

// kafkaRoundLine is one path's round in a line, for KafkaConfig.Log.
func kafkaRoundLine(round int, path string, r KafkaResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round %d %s:", round, path)
	switch path {
	case PathDirect:
		run := r.Direct.Runs[len(r.Direct.Runs)-1]
		fmt.Fprintf(&b, " %.3f s", run.Wall.Seconds())
		for _, p := range run.Procs {
			fmt.Fprintf(&b, "; %s %.3f s CPU", p.Name, p.CPU().Seconds())
		}
	case PathKafka, PathKafkaAgent:
		ks := r.Kafka
		if path == PathKafkaAgent {
			ks = r.KafkaAgent
		}
		k := ks[len(ks)-1]
		fmt.Fprintf(&b, " ingest %.3f s (%.1f MB/s of records), to files %.3f s, %d records of %.0f bytes, broker %.3f s CPU",
			k.Ingest.Seconds(), k.IngestRate()/1e6, k.Wall.Seconds(), k.Records, k.RecordSize(), k.BrokerCPU.Seconds())
		for _, p := range k.Procs {
			fmt.Fprintf(&b, "; %s %.3f s CPU", p.Name, p.CPU().Seconds())
		}
	case PathProducer:
		p := r.Perf[len(r.Perf)-1]
		fmt.Fprintf(&b, " %d records of %d bytes, %.1f records/s = %.1f MB/s, JVM %.3f s CPU, broker %.3f s CPU",
			p.Records, p.RecordSize, p.RecordsPerSec, p.BytesPerSec()/1e6, p.Proc.CPU().Seconds(), p.BrokerCPU.Seconds())
	}
	return b.String()
}

// sortedCopy returns ds sorted, not touching ds.
func sortedCopy(ds []time.Duration) []time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s
}
