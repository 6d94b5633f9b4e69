package bench

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// KafkaScaleConfig describes a scale run: many agents replaying through
// ingest collectors into one topic, written by 1, 2, ... writers of one
// group on one root. The zero value of each field but Exe means its
// default.
type KafkaScaleConfig struct {
	Exe        string   // the pcapsync binary to run; required
	Agents     int      // 0 means 24
	Packets    int      // packets per agent (an IMIX file each agent replays); 0 means 20 000
	Partitions int32    // of the topic; 0 means 12
	Writers    []int    // writer counts, one run each; nil means 1, 2, 3
	Ingest     int      // ingest collectors, the agents spread over them; 0 means 2
	Brokers    []string // bootstrap brokers of a Kafka to use; nil: start one (kafkatest), whose CPU is then measured
	Dir        string   // work directory, kept afterwards; "" means a temporary one, removed
	Log        io.Writer
}

func (c KafkaScaleConfig) withDefaults() KafkaScaleConfig {
	if c.Agents == 0 {
		c.Agents = 24
	}
	if c.Packets == 0 {
		c.Packets = 20_000
	}
	if c.Partitions == 0 {
		c.Partitions = 12
	}
	if len(c.Writers) == 0 {
		c.Writers = []int{1, 2, 3}
	}
	if c.Ingest == 0 {
		c.Ingest = 2
	}
	return c
}

// ScaleWriter is what one writer of a scale run did.
type ScaleWriter struct {
	Partitions int // held once the group caught up
	Packets    int64
	Bytes      int64 // packet bytes written, from its closing summary
	Usage      ProcUsage
}

// ScaleRun is one scale run with Writers writers.
type ScaleRun struct {
	Writers       int
	Packets       int           // all agents' packets, every one found exactly once in the files
	Ingest        time.Duration // the agents' start to the last one's exit (all in Kafka)
	Wall          time.Duration // the agents' start to the group's lag 0
	PartRecords   []int64       // records per partition
	AgentsPerPart []int         // agents per partition (from the files' owners)
	Out           []ScaleWriter
	IngestCPU     time.Duration // all ingest collectors
	AgentCPU      time.Duration // all agents
	BrokerCPU     time.Duration // 0 when not measured
}

// CPUPerByte returns the largest deviation, over the writers, of a
// writer's share of the writers' CPU from its share of their bytes (as
// a fraction of the bytes share): how closely each writer's cost
// follows the bytes it was dealt.
func (r ScaleRun) CPUPerByte() float64 {
	var dev float64
	total, bytes := r.WritersCPU().Seconds(), int64(0)
	for _, w := range r.Out {
		bytes += w.Bytes
	}
	for _, w := range r.Out {
		if w.Bytes == 0 || total == 0 {
			return 0
		}
		share := float64(w.Bytes) / float64(bytes)
		dev = max(dev, abs(w.Usage.CPU().Seconds()/total-share)/share)
	}
	return dev
}

// WritersCPU returns the CPU time of all the writers.
func (r ScaleRun) WritersCPU() time.Duration {
	var t time.Duration
	for _, w := range r.Out {
		t += w.Usage.CPU()
	}
	return t
}

// Spread returns max/min over the writers of partitions, of bytes, and
// of CPU time, and the largest deviation of a writer's CPU share from
// 1/N (as a fraction of 1/N).
func (r ScaleRun) Spread() (parts, bytes, cpu, shareDev float64) {
	if len(r.Out) == 0 {
		return 0, 0, 0, 0
	}
	ratio := func(f func(ScaleWriter) float64) float64 {
		xs := make([]float64, len(r.Out))
		for i, w := range r.Out {
			xs[i] = f(w)
		}
		lo, hi := slices.Min(xs), slices.Max(xs)
		if lo <= 0 {
			return 0 // infinite: a writer did nothing
		}
		return hi / lo
	}
	parts = ratio(func(w ScaleWriter) float64 { return float64(w.Partitions) })
	bytes = ratio(func(w ScaleWriter) float64 { return float64(w.Bytes) })
	cpu = ratio(func(w ScaleWriter) float64 { return w.Usage.CPU().Seconds() })
	total, fair := r.WritersCPU().Seconds(), 1/float64(len(r.Out))
	for _, w := range r.Out {
		shareDev = max(shareDev, abs(w.Usage.CPU().Seconds()/total-fair)/fair)
	}
	return parts, bytes, cpu, shareDev
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// Even reports whether the spread counts as even: partitions and bytes
// within 1.5x (max/min), each writer's CPU share within 25% of 1/N.
func (r ScaleRun) Even() bool {
	p, b, _, dev := r.Spread()
	return p > 0 && p <= 1.5 && b > 0 && b <= 1.5 && dev <= 0.25
}

// KafkaScaleResult is what KafkaScale measured.
type KafkaScaleResult struct {
	Agents, PacketsPerAgent int
	InputBytes              int64 // one agent's file
	Partitions              int32
	Ingest                  int
	OwnBroker               bool
	Runs                    []ScaleRun
}

// WriteKafkaScale writes a table per run (one row per writer) and a
// summary table.
func WriteKafkaScale(w io.Writer, r KafkaScaleResult, markdown bool) error {
	ew := &errWriter{w: w}
	ew.printf("%d agents (distinct names), each replaying an IMIX file of %s packets (%s bytes), through %d ingest collector(s) (the agents spread over them), into a topic of %d partitions; N writers of one group on one root, started before the agents and holding every partition. Each run a fresh topic, group and root. Every agent's files hold its packets exactly once (checked). Even: partitions and bytes max/min <= 1.5, each writer's CPU share within 25%% of 1/N. The group deals out partitions; bytes follow the agents each partition holds (the key's hash).\n\n",
		r.Agents, groupDigits(int64(r.PacketsPerAgent)), groupDigits(r.InputBytes), r.Ingest, r.Partitions)
	sum := [][]string{{"writers", "packets/s to files (lag 0)", "ingest s / to files s", "writers' CPU s per M packets", "ingest CPU s per M", "agents' CPU s per M", "broker CPU s per M", "partitions max/min", "bytes max/min", "CPU share off 1/N by at most", "CPU share off bytes share by at most", "even"}}
	for _, run := range r.Runs {
		ew.printf("%d writer(s): records per partition %v, agents per partition %v.\n\n", run.Writers, run.PartRecords, run.AgentsPerPart)
		total := run.WritersCPU().Seconds()
		var allBytes int64
		for _, o := range run.Out {
			allBytes += o.Bytes
		}
		rows := [][]string{{"writer", "partitions", "packets", "bytes written", "share of bytes", "CPU s", "user / sys s", "share of writers' CPU", "peak RSS"}}
		for i, o := range run.Out {
			rows = append(rows, []string{fmt.Sprint(i + 1), fmt.Sprint(o.Partitions), groupDigits(o.Packets), groupDigits(o.Bytes),
				fmt.Sprintf("%.2f", float64(o.Bytes)/float64(max(allBytes, 1))), fmt.Sprintf("%.3f", o.Usage.CPU().Seconds()), fmt.Sprintf("%.3f / %.3f", o.Usage.User.Seconds(), o.Usage.Sys.Seconds()),
				fmt.Sprintf("%.2f (1/N %.2f)", o.Usage.CPU().Seconds()/total, 1/float64(len(run.Out))), fmtRSS(o.Usage.MaxRSS)})
		}
		if ew.err == nil {
			ew.err = table(w, rows, markdown)
		}
		ew.printf("\n")
		p, b, _, dev := run.Spread()
		n := run.Packets
		broker := "-"
		if r.OwnBroker {
			broker = fmt.Sprintf("%.3f", perM(run.BrokerCPU, n))
		}
		sum = append(sum, []string{fmt.Sprint(run.Writers), fmtRate(float64(n) / run.Wall.Seconds()),
			fmt.Sprintf("%.2f / %.2f", run.Ingest.Seconds(), run.Wall.Seconds()),
			fmt.Sprintf("%.3f", perM(run.WritersCPU(), n)), fmt.Sprintf("%.3f", perM(run.IngestCPU, n)), fmt.Sprintf("%.3f", perM(run.AgentCPU, n)), broker,
			fmt.Sprintf("%.2f", p), fmt.Sprintf("%.2f", b), fmt.Sprintf("%.0f%%", 100*dev), fmt.Sprintf("%.0f%%", 100*run.CPUPerByte()), yesNo(run.Even())})
	}
	if ew.err == nil {
		ew.err = table(w, sum, markdown)
	}
	return ew.err
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
