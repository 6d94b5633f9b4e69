package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// Kafka runs, on one generated IMIX file of cfg.Packets packets and for
// cfg.Rounds rounds with the paths alternating, the direct path (agent
// -> collector -> files), the Kafka path (agent -> ingest collector ->
// broker -> writer -> files) and Kafka's ProducerPerformance with the
// Kafka path's record size into the same broker, checking that every
// packet reached the files exactly once; then, as root, the latency of
// both paths at cfg.LatencyRate on loopback. It starts a broker unless
// cfg.Brokers are given, and stops it. Traffic stays on loopback.
func Kafka(ctx context.Context, cfg KafkaConfig) (KafkaResult, error) {
	cfg = cfg.withDefaults()
	res := KafkaResult{Packets: cfg.Packets, Direct: MethodResult{Name: MethodPcapsync}}
	if cfg.Exe == "" {
		return res, errors.New("bench kafka: KafkaConfig.Exe (the pcapsync binary) is required")
	}
	if _, err := exec.LookPath("java"); err != nil {
		return res, errors.New("bench kafka: java not installed (Kafka's tools run on it)")
	}
	ks, err := setUpKafka(ctx, cfg.Exe, cfg.Dir, "pcapsync-kafka", cfg.Brokers, cfg.Packets)
	if err != nil {
		return res, fmt.Errorf("bench kafka: %w", err)
	}
	defer ks.close()
	res.OwnBroker, res.InputBytes = ks.b.pid != 0, ks.inBytes
	dir, in := ks.dir, ks.in
	env := kafkaEnv{cfg: cfg, dir: dir, in: in, b: ks.b}
	paths := []string{PathDirect, PathKafka, PathKafkaAgent, PathProducer}
	for round := range cfg.Rounds {
		for k := range paths {
			path := paths[(round+k)%len(paths)]
			if err := settle(ctx, cfg.Settle); err != nil {
				return res, err
			}
			var err error
			switch path {
			case PathDirect:
				var r PipelineRun
				r, err = runPcapsync(ctx, pipelineEnv{cfg: PipelineConfig{Exe: cfg.Exe, Packets: cfg.Packets}, dir: dir, in: in})
				if err == nil {
					res.Direct.Runs = append(res.Direct.Runs, r)
					err = os.RemoveAll(filepath.Join(dir, "pcapsync-out")) // see freshPages
				}
			case PathKafka, PathKafkaAgent:
				var r KafkaRun
				r, err = env.runKafkaPath(ctx, round+1, path == PathKafka)
				if err == nil && path == PathKafka {
					res.Kafka = append(res.Kafka, r)
				} else if err == nil {
					res.KafkaAgent = append(res.KafkaAgent, r)
				}
			case PathProducer:
				// Round 1 runs the Kafka path first: its records give
				// the size and count.
				var r PerfRun
				r, err = env.runPerf(ctx, round+1, res.Kafka)
				if err == nil {
					res.Perf = append(res.Perf, r)
				}
			}
			if err != nil {
				return res, fmt.Errorf("bench kafka: round %d, %s: %w", round+1, path, err)
			}
			if cfg.Log != nil {
				fmt.Fprintln(cfg.Log, kafkaRoundLine(round+1, path, res))
			}
		}
	}
	for i, k := range res.Kafka {
		if err := settle(ctx, cfg.Settle); err != nil {
			return res, err
		}
		f, err := env.runFloor(ctx, i+1, k.topic)
		if err != nil {
			return res, fmt.Errorf("bench kafka: franz-go alone, round %d: %w", i+1, err)
		}
		res.Floor = append(res.Floor, f)
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, "round %d franz-go alone: %d records of %d bytes; consume %.3f s CPU, relay %.3f s CPU\n", i+1, f.Records, f.Bytes, f.Consume.Seconds(), f.Relay.Seconds())
		}
	}
	res.Latency = env.latency(ctx)
	if res.Latency.Error != "" {
		return res, fmt.Errorf("bench kafka: latency: %s", res.Latency.Error)
	}
	return res, nil
}

// freshPages: on a VM that returns freed memory to its host (virtio
// balloon free page reporting, every 2 s), a process writing into page
// cache pages freed a moment before pays the copy alone, one writing
// into pages freed longer ago pays a host fault per page too: several
// times the system time. So that no path writes into pages another
// path (or its own last round) freed just before, every path's files
// are deleted as soon as its round is measured, the topics only at the
// end, and each round starts KafkaConfig.Settle after the last one ended.

// settle waits d (KafkaConfig.Settle), or until ctx ends.
func settle(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// kafkaSetup is what both Kafka benches start from: a work directory,
// a broker and an IMIX input file in the page cache.
type kafkaSetup struct {
	dir, in string
	inBytes int64
	b       *benchBroker
	done    func() // removes a temporary work directory
}

// setUpKafka makes the work directory (dir, or a temporary one named
// after prefix), starts a broker unless brokers are given, and
// generates and reads the input of packets IMIX packets.
func setUpKafka(ctx context.Context, exe, dir, prefix string, brokers []string, packets int) (*kafkaSetup, error) {
	d, done, err := workDir(dir, prefix)
	if err != nil {
		return nil, err
	}
	ks := &kafkaSetup{dir: d, in: filepath.Join(d, "in-imix.pcap"), done: done}
	if ks.b, err = startBroker(d, brokers); err != nil {
		done()
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, exe, "gen", "file", "--out", ks.in,
		"--count", strconv.Itoa(packets), "--mix", "imix").CombinedOutput(); err != nil {
		ks.close()
		return nil, fmt.Errorf("generating the input: %w: %s", err, out)
	}
	if ks.inBytes, err = warm(ks.in); err != nil {
		ks.close()
		return nil, err
	}
	return ks, nil
}

// close stops the broker the set-up started and removes a temporary
// work directory.
func (ks *kafkaSetup) close() {
	ks.b.close() // best effort: a directory left behind is all that is at stake
	ks.done()
}

// workDir returns dir, created, or a new temporary directory named
// after prefix; done removes the temporary one.
func workDir(dir, prefix string) (string, func(), error) {
	if dir != "" {
		return dir, func() {}, os.MkdirAll(dir, 0o750)
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// kafkaEnv is what every Kafka round gets.
type kafkaEnv struct {
	cfg KafkaConfig
	dir string // work directory
	in  string // input file, in the page cache
	b   *benchBroker
}

// kafkaProcs starts ingest collectors and writers on one topic and
// group, each with a metrics address.
type kafkaProcs struct {
	ps           *procSet
	exe, brokers string
	topic, group string
	partitions   int32
	root         string
}

// ingest starts an ingest collector and waits until it listens; it
// returns the collector, its address and its metrics address.
func (k *kafkaProcs) ingest(ctx context.Context, name string) (p *proc, addr, metrics string, err error) {
	if addr, err = freeLoopbackAddr(); err != nil {
		return nil, "", "", err
	}
	if metrics, err = freeLoopbackAddr(); err != nil {
		return nil, "", "", err
	}
	p, err = k.ps.start(name, nil, k.exe, "collector", "--insecure", "--listen", addr, "--kafka", k.brokers,
		"--kafka-topic", k.topic, "--kafka-partitions", strconv.Itoa(int(k.partitions)), "--metrics", metrics, "--log-level", "error")
	if err != nil {
		return nil, "", "", err
	}
	if err := waitListening(ctx, addr, p); err != nil {
		return nil, "", "", err
	}
	return p, addr, metrics, nil
}

// writer starts a writer of the group and returns it with its metrics
// address (the caller waits for its partitions).
func (k *kafkaProcs) writer(name string) (*proc, string, error) {
	metrics, err := freeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	p, err := k.ps.start(name, nil, k.exe, "writer", "--kafka", k.brokers, "--kafka-topic", k.topic,
		"--kafka-partitions", strconv.Itoa(int(k.partitions)), "--group", k.group, "--dir", k.root,
		"--metrics", metrics, "--log-level", "error", "--rotate-interval", "0") // the latency's tailer follows one file
	if err != nil {
		return nil, "", err
	}
	return p, metrics, nil
}

// assigned returns the partitions a writer holds now, by its metrics.
func assigned(ctx context.Context, metrics string) (int, error) {
	v, err := scrapeSum(ctx, metrics, "pcapsync_kafka_assigned_partitions")
	return int(v), err
}

// stopProc ends p with SIGTERM and waits for it, failing when it exits
// with an error.
func stopProc(p *proc) error {
	p.signal(syscall.SIGTERM)
	if err := p.wait(); err != nil {
		return fmt.Errorf("%s: %w: %s", p.name, err, p.stderr.String())
	}
	return nil
}

// runKafkaPath: an ingest collector (viaIngest) and a writer on a fresh
// topic and group, the writer holding the topic's partitions, then an
// agent replaying the file into the collector, or straight into Kafka
// (agent --kafka); timed from the agent's start to its exit (ingest)
// and to the group's lag 0 (to files).
func (e kafkaEnv) runKafkaPath(ctx context.Context, round int, viaIngest bool) (KafkaRun, error) {
	var run KafkaRun
	out := filepath.Join(e.dir, "kafka-out")
	if err := os.RemoveAll(out); err != nil {
		return run, err
	}
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	name := fmt.Sprintf("pcapsync-bench-%d-%d", os.Getpid(), round)
	if !viaIngest {
		name += "-agent"
	}
	k := &kafkaProcs{ps: ps, exe: e.cfg.Exe, brokers: e.b.brokerList(), partitions: e.cfg.Partitions, root: out, topic: name, group: name}
	e.b.dropTopic(k.topic)
	agentArgs := []string{e.cfg.Exe, "agent", "--name", "bench", "--read", e.in, "--log-level", "error",
		"--kafka", k.brokers, "--kafka-topic", k.topic, "--kafka-partitions", strconv.Itoa(int(k.partitions))}
	var ing *proc
	if viaIngest {
		var addr string
		var err error
		if ing, addr, _, err = k.ingest(ctx, "ingest collector"); err != nil {
			return run, err
		}
		agentArgs = append(agentArgs[:len(agentArgs)-6], "--insecure", "--collector", addr)
	}
	wr, wmetrics, err := k.writer("writer")
	if err != nil {
		return run, err
	}
	if err := pollUntil(ctx, 60*time.Second, "the writer holding every partition", wr, func() (bool, error) {
		n, err := assigned(ctx, wmetrics)
		return n == int(e.cfg.Partitions), err
	}); err != nil {
		return run, err
	}
	cpu0, err := e.b.cpu()
	if err != nil {
		return run, err
	}
	start := time.Now()
	ag, err := ps.start("agent", nil, agentArgs...)
	if err != nil {
		return run, err
	}
	err = ag.wait()
	run.Ingest = time.Since(start)
	if err != nil {
		return run, fmt.Errorf("agent: %w: %s", err, ag.stderr.String())
	}
	if err := checkAcked(ag, e.cfg.Packets); err != nil {
		return run, err
	}
	end, err := e.b.waitCaughtUp(ctx, k.topic, k.group, 120*time.Second)
	if err != nil {
		return run, err
	}
	run.Wall = end.Sub(start)
	cpu1, err := e.b.cpu()
	if err != nil {
		return run, err
	}
	run.BrokerCPU = cpu1 - cpu0
	// What reached the files' writer: every record, once the group's
	// lag is 0.
	recs, err := scrapeSum(ctx, wmetrics, "pcapsync_kafka_consumed_records_total")
	if err != nil {
		return run, err
	}
	bytes, err := scrapeSum(ctx, wmetrics, "pcapsync_kafka_consumed_bytes_total")
	if err != nil {
		return run, err
	}
	run.Records, run.RecordBytes, run.topic = int64(recs), int64(bytes), k.topic
	if ing != nil {
		if err := stopProc(ing); err != nil {
			return run, err
		}
	}
	if err := stopProc(wr); err != nil {
		return run, err
	}
	files, err := filepath.Glob(filepath.Join(out, "bench", "*.pcapng"))
	if err != nil {
		return run, err
	}
	if err := checkPackets(e.cfg.Packets, files...); err != nil {
		return run, fmt.Errorf("%w; writer: %s%s", err, wr.stdout.String(), wr.stderr.String())
	}
	wu := wr.usage
	if wu.Bytes, err = dirSize(out); err != nil {
		return run, err
	}
	run.Procs = []ProcUsage{ag.usage, wu}
	if ing != nil {
		run.Procs = []ProcUsage{ag.usage, ing.usage, wu}
	}
	return run, os.RemoveAll(out) // see freshPages
}

// checkAcked fails unless agent a's closing line says want packets were
// acknowledged.
func checkAcked(a *proc, want int) error {
	sum, err := parseAgentSummary(a.stdout.String())
	if err != nil {
		return err
	}
	if sum.Acked != uint64(want) {
		return fmt.Errorf("%s: %d of %d packets acknowledged: %s", a.name, sum.Acked, want, strings.TrimSpace(a.stdout.String()))
	}
	return nil
}

// perfLineRE is ProducerPerformance's closing line ("360 records sent,
// 150.2 records/sec (150.20 MB/sec), ... 99.9th."); its progress lines
// start the same but have no percentiles.
var perfLineRE = regexp.MustCompile(`(?m)^(\d+) records sent, ([0-9.]+) records/sec \([0-9.]+ MB/sec\).*99\.9th`)

// runPerf runs ProducerPerformance into a fresh topic with the Kafka
// path's median record count and mean record size.
func (e kafkaEnv) runPerf(ctx context.Context, round int, kafka []KafkaRun) (PerfRun, error) {
	var r PerfRun
	if len(kafka) == 0 {
		return r, errors.New("no Kafka path round yet to take the record size from")
	}
	r.Records = int(medianOf(kafka, func(k KafkaRun) float64 { return float64(k.Records) }))
	r.RecordSize = int(medianOf(kafka, KafkaRun.RecordSize) + 0.5)
	topic := fmt.Sprintf("pcapsync-bench-perf-%d-%d", os.Getpid(), round)
	if err := e.b.ensureTopic(ctx, topic, e.cfg.Partitions); err != nil {
		return r, fmt.Errorf("topic %s: %w", topic, err)
	}
	e.b.dropTopic(topic)
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	cpu0, err := e.b.cpu()
	if err != nil {
		return r, err
	}
	start := time.Now()
	p, err := ps.start("ProducerPerformance", nil, "java", "-Xmx512m", "-cp", filepath.Join(e.b.libs, "*"),
		"org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
		"--num-records", strconv.Itoa(r.Records), "--record-size", strconv.Itoa(r.RecordSize), "--throughput", "-1",
		"--producer-props", "bootstrap.servers="+e.b.brokerList(), "acks=all", "batch.size="+strconv.Itoa(e.cfg.PerfBatch),
		"max.request.size="+strconv.Itoa(max(2*r.RecordSize, e.cfg.PerfBatch)+1<<20), "buffer.memory="+strconv.Itoa(max(32<<20, 4*e.cfg.PerfBatch)))
	if err != nil {
		return r, err
	}
	err = p.wait()
	wall := time.Since(start)
	if err != nil {
		return r, fmt.Errorf("%w: %s%s", err, p.stdout.String(), p.stderr.String())
	}
	cpu1, err := e.b.cpu()
	if err != nil {
		return r, err
	}
	r.BrokerCPU = cpu1 - cpu0
	r.Proc = p.usage
	r.Proc.Wall = wall
	m := perfLineRE.FindAllStringSubmatch(p.stdout.String(), -1)
	if len(m) == 0 {
		return r, fmt.Errorf("no closing line in its output: %s", p.stdout.String())
	}
	last := m[len(m)-1]
	if sent, _ := strconv.Atoi(last[1]); sent != r.Records {
		return r, fmt.Errorf("sent %d records, not %d: %s", sent, r.Records, last[0])
	}
	if r.RecordsPerSec, err = strconv.ParseFloat(last[2], 64); err != nil {
		return r, fmt.Errorf("its rate: %w", err)
	}
	return r, nil
}

// latency runs both paths at once on loopback as root: a collector, an
// ingest collector and a writer, two agents capturing lo (the UDP port
// of a sink this process listens on), and pcapsync gen udp sending
// there at cfg.LatencyRate; it tails the collector's and the writer's
// files.
func (e kafkaEnv) latency(ctx context.Context) KafkaLatency {
	l := KafkaLatency{Flush: e.cfg.Flush, Rate: e.cfg.LatencyRate, PollEvery: time.Millisecond}
	switch {
	case e.cfg.LatencyDuration < 0:
		l.Skipped = "not asked for"
		return l
	case os.Geteuid() != 0:
		l.Skipped = "needs root (capture on lo)"
		return l
	}
	if err := e.runLatency(ctx, &l); err != nil {
		l.Error = err.Error()
	}
	return l
}

func (e kafkaEnv) runLatency(ctx context.Context, l *KafkaLatency) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sink, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer sink.Close()
	go func() { // drain: the sender gets no ICMP errors, the socket no backlog
		buf := make([]byte, 64<<10)
		for {
			if _, _, err := sink.ReadFrom(buf); err != nil {
				return
			}
		}
	}()
	port := sink.LocalAddr().(*net.UDPAddr).Port
	filter := fmt.Sprintf("udp and dst port %d", port)
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	directOut, kafkaOut := filepath.Join(e.dir, "latency-direct"), filepath.Join(e.dir, "latency-kafka")
	for _, d := range []string{directOut, kafkaOut} {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	caddr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	coll, err := ps.start("collector", nil, e.cfg.Exe, "collector", "--insecure", "--listen", caddr, "--dir", directOut, "--log-level", "error",
		"--rotate-interval", "0") // the tailer follows one file
	if err != nil {
		return err
	}
	if err := waitListening(ctx, caddr, coll); err != nil {
		return err
	}
	k := &kafkaProcs{ps: ps, exe: e.cfg.Exe, brokers: e.b.brokerList(), partitions: e.cfg.Partitions, root: kafkaOut,
		topic: fmt.Sprintf("pcapsync-bench-%d-latency", os.Getpid()), group: fmt.Sprintf("pcapsync-bench-%d-latency", os.Getpid())}
	e.b.dropTopic(k.topic)
	_, iaddr, _, err := k.ingest(ctx, "ingest collector")
	if err != nil {
		return err
	}
	wr, wmetrics, err := k.writer("writer")
	if err != nil {
		return err
	}
	if err := pollUntil(ctx, 60*time.Second, "the writer holding every partition", wr, func() (bool, error) {
		n, err := assigned(ctx, wmetrics)
		return n == int(e.cfg.Partitions), err
	}); err != nil {
		return err
	}
	agents := map[string]string{"latd": caddr, "latk": iaddr}
	var aps []*proc
	for _, name := range []string{"latd", "latk"} {
		a, err := ps.start("agent "+name, nil, e.cfg.Exe, "agent", "--insecure", "--collector", agents[name], "--name", name,
			"--iface", "lo", "--flush-interval", e.cfg.Flush.String(), "--log-level", "error", filter)
		if err != nil {
			return err
		}
		aps = append(aps, a)
	}
	// No signal says an agent's ring is open: give both a second, as
	// Latency does.
	time.Sleep(time.Second)
	l.Sent = int(e.cfg.LatencyDuration.Seconds() * float64(e.cfg.LatencyRate))
	gen, err := ps.start("generator", nil, e.cfg.Exe, "gen", "udp", "--to", sink.LocalAddr().String(),
		"--count", strconv.Itoa(l.Sent), "--rate", strconv.Itoa(e.cfg.LatencyRate))
	if err != nil {
		return err
	}
	direct, kafka := &tailer{}, &tailer{}
	genDone := make(chan error, 1)
	go func() { genDone <- gen.wait() }()
	tick := time.NewTicker(l.PollEvery)
	defer tick.Stop()
	deadline := time.Now().Add(e.cfg.LatencyDuration + 60*time.Second)
	var genErr error
	var quietSince time.Time
	sent := false
	for !(sent && time.Since(quietSince) > e.cfg.Flush+2*time.Second) && time.Now().Before(deadline) {
		select {
		case genErr = <-genDone:
			sent, quietSince = true, time.Now()
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			for _, t := range []struct {
				t           *tailer
				agent, root string
			}{{direct, "latd", directOut}, {kafka, "latk", kafkaOut}} {
				if t.t.path == "" {
					t.t.path = partFile(t.root, t.agent)
				}
				// The time of the read, not the tick's.
				t.t.poll(time.Now())
			}
		}
	}
	if genErr != nil {
		return fmt.Errorf("generator: %w: %s", genErr, gen.stderr.String())
	}
	l.DirectFile, l.KafkaFile = direct.path, kafka.path
	if direct.err != nil || kafka.err != nil {
		return fmt.Errorf("reading the files: %w", errors.Join(direct.err, kafka.err))
	}
	l.Direct, l.Kafka = sortedCopy(direct.lat), sortedCopy(kafka.lat)
	for _, a := range aps {
		a.signal(os.Interrupt)
		a.wait()
	}
	if len(l.Direct) < l.Sent || len(l.Kafka) < l.Sent {
		return fmt.Errorf("packets read from the files: direct %d, kafka %d, of %d sent; agents: %s %s", len(l.Direct), len(l.Kafka), l.Sent,
			aps[0].stdout.String()+aps[0].stderr.String(), aps[1].stdout.String()+aps[1].stderr.String())
	}
	return nil
}

// partFile returns the data file agent is writing below root (its
// .part, not the index's or the flow file's beside it), or "" while
// there is none or more than one.
func partFile(root, agent string) string {
	m, _ := filepath.Glob(filepath.Join(root, agent, "*"+layout.PartSuffix))
	var found []string
	for _, p := range m {
		if layout.IsDataFile(agent, strings.TrimSuffix(filepath.Base(p), layout.PartSuffix)) {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		return ""
	}
	return found[0]
}
