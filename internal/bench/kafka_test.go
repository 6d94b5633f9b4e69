package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
)

// requireKafka skips t, or fails it when requireEnv is "1", unless Java
// and scripts/kafka.sh's jars (kafka-tools among them) are there.
func requireKafka(t *testing.T) {
	t.Helper()
	_, err := kafkatest.Libs()
	if err == nil {
		_, err = exec.LookPath("java")
	}
	if err == nil {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("prerequisite missing (%s=1 makes this a failure): %v", requireEnv, err)
	}
	t.Skipf("skipping: %v (set %s=1 to make this a failure)", err, requireEnv)
}

// logWriter is an io.Writer onto t.Log, line by line.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestKafkaBench runs every path of Kafka once on a small file against a
// broker it starts: every packet through each path (Kafka checks the
// files), the record size carried to ProducerPerformance, the broker's
// CPU read, the goals computed; as root the latency of both paths too.
func TestKafkaBench(t *testing.T) {
	requireKafka(t)
	const packets = 20_000
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := KafkaConfig{Exe: pcapsyncExe(t), Packets: packets, Rounds: 1, LatencyDuration: time.Second, Settle: -1, Log: logWriter{t}}
	res, err := Kafka(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Direct.Runs) != 1 || len(res.Kafka) != 1 || len(res.KafkaAgent) != 1 || len(res.Perf) != 1 {
		t.Fatalf("rounds: direct %d, kafka %d, kafka-agent %d, ProducerPerformance %d; want 1 each", len(res.Direct.Runs), len(res.Kafka), len(res.KafkaAgent), len(res.Perf))
	}
	if ka := res.KafkaAgent[0]; len(ka.Procs) != 2 || ka.Procs[0].CPU() <= 0 || ka.Procs[1].CPU() <= 0 || ka.Records < 1 || ka.RecordBytes < int64(res.InputBytes)/2 || ka.Wall < ka.Ingest {
		t.Errorf("kafka-agent round: %d processes %+v, %d records of %d bytes, ingest %v, to files %v; want the agent and the writer, every record", len(ka.Procs), ka.Procs, ka.Records, ka.RecordBytes, ka.Ingest, ka.Wall)
	}
	k, p := res.Kafka[0], res.Perf[0]
	if !res.OwnBroker || k.BrokerCPU <= 0 || p.BrokerCPU <= 0 {
		t.Errorf("broker CPU not measured: own %v, kafka round %v, ProducerPerformance round %v", res.OwnBroker, k.BrokerCPU, p.BrokerCPU)
	}
	if k.Records < 1 || k.RecordBytes < int64(res.InputBytes)/2 || k.Ingest <= 0 || k.Wall < k.Ingest {
		t.Errorf("kafka round: %d records of %d bytes, ingest %v, to files %v (input %d bytes)", k.Records, k.RecordBytes, k.Ingest, k.Wall, res.InputBytes)
	}
	if len(k.Procs) != 3 {
		t.Fatalf("kafka round: %d processes, want agent, ingest collector, writer", len(k.Procs))
	}
	for _, pu := range k.Procs {
		if pu.CPU() <= 0 {
			t.Errorf("kafka round: %s used no CPU", pu.Name)
		}
	}
	if p.Records != int(k.Records) || float64(p.RecordSize) != float64(int(k.RecordSize()+0.5)) || p.RecordsPerSec <= 0 {
		t.Errorf("ProducerPerformance: %d records of %d bytes at %.1f/s; the Kafka path had %d of %.1f", p.Records, p.RecordSize, p.RecordsPerSec, k.Records, k.RecordSize())
	}
	g := res.Goals()
	if len(res.Floor) != 1 {
		t.Fatalf("%d rounds of franz-go alone, want 1", len(res.Floor))
	}
	if f := res.Floor[0]; f.Records != int(k.Records) || f.Bytes != k.RecordBytes || f.Consume <= 0 || f.Relay <= f.Consume {
		t.Errorf("franz-go alone: %d records of %d bytes, consume %v, relay %v; want the Kafka round's %d of %d, a relay dearer than consuming", f.Records, f.Bytes, f.Consume, f.Relay, k.Records, k.RecordBytes)
	}
	if g.IngestRatio <= 0 || g.CPURatio <= 0 || g.CPURatioAgent <= 0 || g.FloorRatio <= 1 {
		t.Errorf("goals not computed: %+v", g)
	}
	if os.Geteuid() == 0 {
		l := res.Latency
		if len(l.Direct) < l.Sent || len(l.Kafka) < l.Sent || l.Sent != 1000 || g.LatencyP99 <= 0 {
			t.Errorf("latency: %d sent, %d direct, %d kafka, p99 %v", l.Sent, len(l.Direct), len(l.Kafka), g.LatencyP99)
		}
	}
	var out bytes.Buffer
	if err := WriteKafka(&out, cfg, res, false); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	for _, want := range []string{"direct: agent -> collector -> files", "kafka: ingest (all in Kafka)", "  broker (apart)",
		"kafka, agents straight to Kafka: to files (lag 0)", "  a relay: reading them, producing each again",
		"  - the least franz-go allows through an ingest collector (direct + the relay's CPU, over direct): " + fmt.Sprintf("%.2fx", g.FloorRatio), "  - the same with agents straight to Kafka (no ingest collector): " + fmt.Sprintf("%.2fx", g.CPURatioAgent),
		"- Kafka path ingest bytes/s >= 0.7x ProducerPerformance's: " + fmt.Sprintf("%.2fx", g.IngestRatio)} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// TestKafkaBenchGivenBroker runs Kafka against a broker it is given:
// nothing of the broker's is measured, everything else is, and the
// broker outlives the bench.
func TestKafkaBenchGivenBroker(t *testing.T) {
	requireKafka(t)
	b := kafkatest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Kafka(ctx, KafkaConfig{Exe: pcapsyncExe(t), Packets: 5000, Rounds: 1, Brokers: []string{b.Addr}, LatencyDuration: -1, Settle: -1, Log: logWriter{t}})
	if err != nil {
		t.Fatal(err)
	}
	if res.OwnBroker || len(res.Kafka) != 1 || res.Kafka[0].BrokerCPU != 0 || len(res.Perf) != 1 || res.Perf[0].BrokerCPU != 0 {
		t.Errorf("own broker %v, kafka rounds %d, ProducerPerformance rounds %d", res.OwnBroker, len(res.Kafka), len(res.Perf))
	}
	if res.Latency.Skipped == "" {
		t.Errorf("latency run not skipped: %+v", res.Latency)
	}
	topics, err := kadm.NewClient(b.Client()).ListTopics(ctx)
	if err != nil {
		t.Fatalf("the broker after the bench: %v", err)
	}
	if names := topics.Names(); len(names) != 0 {
		t.Errorf("topics left behind: %v", names)
	}
}

// TestKafkaScale runs KafkaScale small: 1 and 2 writers share the
// partitions, every packet is written once (KafkaScale checks the
// files; here the writers' own counts add up too).
func TestKafkaScale(t *testing.T) {
	requireKafka(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := KafkaScaleConfig{Exe: pcapsyncExe(t), Agents: 6, Packets: 1000, Partitions: 4, Writers: []int{1, 2}, Ingest: 2, Log: logWriter{t}}
	res, err := KafkaScale(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(res.Runs))
	}
	for i, run := range res.Runs {
		if len(run.Out) != cfg.Writers[i] {
			t.Fatalf("run %d: %d writers, want %d", i, len(run.Out), cfg.Writers[i])
		}
		parts, packets, agents := 0, int64(0), 0
		for _, w := range run.Out {
			parts += w.Partitions
			packets += w.Packets
			if w.Partitions < 1 || w.Usage.CPU() <= 0 {
				t.Errorf("run %d: a writer held %d partitions, used %v CPU", i, w.Partitions, w.Usage.CPU())
			}
		}
		for p, n := range run.AgentsPerPart {
			agents += n
			if (n == 0) != (run.PartRecords[p] == 0) {
				t.Errorf("run %d: partition %d has %d agents by the partitioner and %d records", i, p, n, run.PartRecords[p])
			}
		}
		if parts != 4 || packets != int64(run.Packets) || run.Packets != 6000 || agents != 6 {
			t.Errorf("run %d: partitions %d, packets written %d of %d, agents %d", i, parts, packets, run.Packets, agents)
		}
		if pr, _, _, _ := run.Spread(); pr <= 0 || (len(run.Out) > 1 && run.CPUPerByte() <= 0) {
			t.Errorf("run %d: spread not computed", i)
		}
	}
	var out bytes.Buffer
	if err := WriteKafkaScale(&out, res, true); err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
}

func TestKafkaGoals(t *testing.T) {
	n := 1_000_000
	direct := MethodResult{Runs: []PipelineRun{{Wall: time.Second, Procs: []ProcUsage{{User: time.Second}, {User: time.Second}}}}}
	kafka := func(cpu time.Duration) []KafkaRun {
		return []KafkaRun{{PipelineRun: PipelineRun{Wall: 3 * time.Second, Procs: []ProcUsage{{User: cpu}}}, Ingest: 2 * time.Second, Records: 100, RecordBytes: 200e6}}
	}
	perf := []PerfRun{{Records: 100, RecordSize: 2e6, RecordsPerSec: 100}} // 200 MB/s
	lat := func(p99 time.Duration) KafkaLatency {
		ds := make([]time.Duration, 100)
		for i := range ds {
			ds[i] = time.Millisecond
		}
		ds[98], ds[99] = p99, p99
		return KafkaLatency{Flush: 50 * time.Millisecond, Kafka: ds}
	}
	for _, tc := range []struct {
		name                   string
		r                      KafkaResult
		ingest, cpu            float64
		ingestMet, cpuMet, lat bool
	}{
		{"ingest under, cpu at 1.5, latency under", KafkaResult{Packets: n, Direct: direct, Kafka: kafka(3 * time.Second), Perf: perf, Latency: lat(70 * time.Millisecond)}, 0.5, 1.5, false, true, true},
		{"cpu over", KafkaResult{Packets: n, Direct: direct, Kafka: kafka(4 * time.Second), Perf: perf, Latency: lat(75 * time.Millisecond)}, 0.5, 2, false, false, false},
		{"ingest over 0.7, no latency", KafkaResult{Packets: n, Direct: direct, Kafka: kafka(time.Second), Perf: []PerfRun{{Records: 100, RecordSize: 1e6, RecordsPerSec: 140}}}, 0.714, 0.5, true, true, false},
		{"nothing measured", KafkaResult{Packets: n}, 0, 0, false, false, false},
		{"agents straight to Kafka under, through ingest over", KafkaResult{Packets: n, Direct: direct, Kafka: kafka(4 * time.Second), KafkaAgent: kafka(2 * time.Second), Perf: perf}, 0.5, 2, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.r.Floor = []FloorRun{{Consume: time.Second, Relay: 1500 * time.Millisecond}}
			g := tc.r.Goals()
			if wantFloor := (2 + 1.5) / 2; len(tc.r.Direct.Runs) > 0 && g.FloorRatio != wantFloor || len(tc.r.Direct.Runs) == 0 && g.FloorRatio != 0 {
				t.Errorf("floor %.3f, want %.3f with the direct path measured, else 0", g.FloorRatio, wantFloor)
			}
			if fmt.Sprintf("%.3f %.3f", g.IngestRatio, g.CPURatio) != fmt.Sprintf("%.3f %.3f", tc.ingest, tc.cpu) ||
				g.IngestMet != tc.ingestMet || g.CPUMet != tc.cpuMet || g.LatencyMet != tc.lat {
				t.Errorf("got %+v; want ingest %.2f %v, cpu %.2f %v, latency %v", g, tc.ingest, tc.ingestMet, tc.cpu, tc.cpuMet, tc.lat)
			}
			var out bytes.Buffer
			if err := WriteKafka(&out, KafkaConfig{}, tc.r, true); err != nil {
				t.Fatal(err)
			}
			if want := len(tc.r.KafkaAgent) > 0; want != (g.CPURatioAgent > 0) || (want && g.CPUMetAgent != (g.CPURatioAgent <= 1.5)) {
				t.Errorf("agents straight to Kafka: ratio %.2f met %v", g.CPURatioAgent, g.CPUMetAgent)
			}
			notMet := 3 - btoi(g.IngestMet) - btoi(g.CPUMet) - btoi(g.LatencyMet)
			if len(tc.r.KafkaAgent) > 0 && !g.CPUMetAgent {
				notMet++
			}
			if got := strings.Count(out.String(), "NOT MET"); got != notMet {
				t.Errorf("%d NOT MET in the report for %+v:\n%s", got, g, out.String())
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestScrapeSum(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "# HELP x\npcapsync_a_total 3\npcapsync_a_total_more 100\npcapsync_b{topic=\"t\",partition=\"0\"} 2\npcapsync_b{topic=\"t\",partition=\"1\"} 5\n")
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, tc := range []struct {
		name string
		want float64
		ok   bool
	}{{"pcapsync_a_total", 3, true}, {"pcapsync_b", 7, true}, {"pcapsync_c", 0, false}} {
		got, err := scrapeSum(context.Background(), addr, tc.name)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("%s: %v, %v; want %v, ok %v", tc.name, got, err, tc.want, tc.ok)
		}
	}
}

func TestProcCPU(t *testing.T) {
	deadline := time.Now().Add(10 * time.Second)
	var d time.Duration
	for d == 0 && time.Now().Before(deadline) { // burn CPU until a tick is counted
		var err error
		if d, err = procCPU(os.Getpid()); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
	if d <= 0 {
		t.Errorf("no CPU time read for this process")
	}
	if _, err := procCPU(1 << 30); err == nil {
		t.Error("a process that does not exist: no error")
	}
}

func TestScaleSpread(t *testing.T) {
	w := func(parts int, bytes int64, cpu time.Duration) ScaleWriter {
		return ScaleWriter{Partitions: parts, Bytes: bytes, Usage: ProcUsage{User: cpu}}
	}
	for _, tc := range []struct {
		name                    string
		out                     []ScaleWriter
		parts, bytes, dev, perB float64
		even                    bool
	}{
		{"one", []ScaleWriter{w(12, 100, time.Second)}, 1, 1, 0, 0, true},
		{"even", []ScaleWriter{w(6, 100, time.Second), w(6, 100, time.Second)}, 1, 1, 0, 0, true},
		{"bytes uneven, CPU follows them", []ScaleWriter{w(4, 300, 3*time.Second), w(4, 100, time.Second)}, 1, 3, 0.5, 0, false},
		{"CPU off its bytes", []ScaleWriter{w(4, 100, 3*time.Second), w(4, 100, time.Second)}, 1, 1, 0.5, 0.5, false},
		{"a writer idle", []ScaleWriter{w(12, 100, time.Second), w(0, 0, 0)}, 0, 0, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ScaleRun{Out: tc.out}
			p, b, _, dev := r.Spread()
			if p != tc.parts || b != tc.bytes || dev != tc.dev || r.CPUPerByte() != tc.perB || r.Even() != tc.even {
				t.Errorf("spread %.2f %.2f %.2f, per byte %.2f, even %v; want %.2f %.2f %.2f, %.2f, %v",
					p, b, dev, r.CPUPerByte(), r.Even(), tc.parts, tc.bytes, tc.dev, tc.perB, tc.even)
			}
		})
	}
}
