package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaScale runs, for each count in cfg.Writers, cfg.Agents agents
// replaying an IMIX file of cfg.Packets packets each through
// cfg.Ingest ingest collectors into a fresh topic of cfg.Partitions
// partitions, written by that many writers of one group on one root,
// and reports what each writer held, wrote and spent; every agent's
// packets must be in the files exactly once. It starts a broker unless
// cfg.Brokers are given. Traffic stays on loopback.
func KafkaScale(ctx context.Context, cfg KafkaScaleConfig) (KafkaScaleResult, error) {
	cfg = cfg.withDefaults()
	res := KafkaScaleResult{Agents: cfg.Agents, PacketsPerAgent: cfg.Packets, Partitions: cfg.Partitions, Ingest: cfg.Ingest}
	if cfg.Exe == "" {
		return res, errors.New("bench kafka-scale: KafkaScaleConfig.Exe (the pcapsync binary) is required")
	}
	if _, err := raiseNoFile(4096); err != nil {
		return res, fmt.Errorf("bench kafka-scale: %w", err)
	}
	ks, err := setUpKafka(ctx, cfg.Exe, cfg.Dir, "pcapsync-kafka-scale", cfg.Brokers, cfg.Packets)
	if err != nil {
		return res, fmt.Errorf("bench kafka-scale: %w", err)
	}
	defer ks.close()
	res.OwnBroker, res.InputBytes = ks.b.pid != 0, ks.inBytes
	b, dir, in := ks.b, ks.dir, ks.in
	for _, n := range cfg.Writers {
		run, err := scaleRun(ctx, cfg, b, dir, in, n)
		if err != nil {
			return res, fmt.Errorf("bench kafka-scale: %d writer(s): %w", n, err)
		}
		res.Runs = append(res.Runs, run)
		if cfg.Log != nil {
			p, by, _, dev := run.Spread()
			fmt.Fprintf(cfg.Log, "%d writer(s): ingest %.2f s, to files %.2f s, writers' CPU %.3f s, partitions max/min %.2f, bytes max/min %.2f, CPU share off 1/N by %.0f%%\n",
				n, run.Ingest.Seconds(), run.Wall.Seconds(), run.WritersCPU().Seconds(), p, by, 100*dev)
		}
	}
	return res, nil
}

// writerSummaryRE is a writer's closing totals line.
var writerSummaryRE = regexp.MustCompile(`pcapsync collector: sessions \d+, .*, packets (\d+), bytes (\d+), `)

// scaleRun is one run of KafkaScale with n writers.
func scaleRun(ctx context.Context, cfg KafkaScaleConfig, b *benchBroker, dir, in string, n int) (ScaleRun, error) {
	run := ScaleRun{Writers: n, Packets: cfg.Agents * cfg.Packets}
	root := filepath.Join(dir, "scale-out")
	if err := os.RemoveAll(root); err != nil {
		return run, err
	}
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	name := fmt.Sprintf("pcapsync-scale-%d-%d", os.Getpid(), n)
	k := &kafkaProcs{ps: ps, exe: cfg.Exe, brokers: b.brokerList(), partitions: cfg.Partitions, root: root, topic: name, group: name}
	b.dropTopic(k.topic)
	var ingest []*proc
	var addrs []string
	for i := range cfg.Ingest {
		p, addr, _, err := k.ingest(ctx, fmt.Sprintf("ingest %d", i+1))
		if err != nil {
			return run, err
		}
		ingest, addrs = append(ingest, p), append(addrs, addr)
	}
	writers := make([]*proc, n)
	metrics := make([]string, n)
	for i := range writers {
		var err error
		if writers[i], metrics[i], err = k.writer(fmt.Sprintf("writer %d", i+1)); err != nil {
			return run, err
		}
	}
	// Every writer in the group, the partitions dealt out among them.
	if err := pollUntil(ctx, 90*time.Second, "the writers holding every partition, each some", nil, func() (bool, error) {
		total := 0
		for _, m := range metrics {
			a, err := assigned(ctx, m)
			if err != nil || a == 0 {
				return false, err
			}
			total += a
		}
		return total == int(cfg.Partitions), nil
	}); err != nil {
		return run, err
	}
	cpu0, err := b.cpu()
	if err != nil {
		return run, err
	}
	agents := make([]*proc, cfg.Agents)
	names := make([]string, cfg.Agents)
	start := time.Now()
	for i := range agents {
		names[i] = fmt.Sprintf("host-%02d", i+1)
		// Each agent gets every ingest collector, starting with its own.
		order := append(append([]string(nil), addrs[i%len(addrs):]...), addrs[:i%len(addrs)]...)
		if agents[i], err = ps.start("agent "+names[i], nil, cfg.Exe, "agent", "--insecure", "--collector", strings.Join(order, ","),
			"--name", names[i], "--read", in, "--log-level", "error"); err != nil {
			return run, err
		}
	}
	for _, a := range agents {
		if err := a.wait(); err != nil {
			return run, fmt.Errorf("%s: %w: %s", a.name, err, a.stderr.String())
		}
		if err := checkAcked(a, cfg.Packets); err != nil {
			return run, err
		}
		run.AgentCPU += a.usage.CPU()
	}
	run.Ingest = time.Since(start)
	end, err := b.waitCaughtUp(ctx, k.topic, k.group, 300*time.Second)
	if err != nil {
		return run, err
	}
	run.Wall = end.Sub(start)
	cpu1, err := b.cpu()
	if err != nil {
		return run, err
	}
	run.BrokerCPU = cpu1 - cpu0
	run.Out = make([]ScaleWriter, n)
	for i, m := range metrics {
		if run.Out[i].Partitions, err = assigned(ctx, m); err != nil {
			return run, err
		}
	}
	if run.PartRecords, err = b.partitionEnds(ctx, k.topic); err != nil {
		return run, err
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(k.topic)
	run.AgentsPerPart = make([]int, cfg.Partitions)
	for _, a := range names {
		run.AgentsPerPart[part.Partition(&kgo.Record{Key: []byte(a)}, int(cfg.Partitions))]++
	}
	var errs []error
	for _, p := range ingest {
		errs = append(errs, stopProc(p))
		run.IngestCPU += p.usage.CPU()
	}
	for i, w := range writers {
		errs = append(errs, stopProc(w))
		run.Out[i].Usage = w.usage
		m := writerSummaryRE.FindStringSubmatch(w.stdout.String())
		if m == nil {
			errs = append(errs, fmt.Errorf("%s: no closing summary in %q", w.name, w.stdout.String()))
			continue
		}
		run.Out[i].Packets, _ = strconv.ParseInt(m[1], 10, 64)
		run.Out[i].Bytes, _ = strconv.ParseInt(m[2], 10, 64)
	}
	if err := errors.Join(errs...); err != nil {
		return run, err
	}
	for _, a := range names {
		files, err := filepath.Glob(filepath.Join(root, a, "*.pcapng"))
		if err != nil {
			return run, err
		}
		if err := checkPackets(cfg.Packets, files...); err != nil {
			return run, fmt.Errorf("agent %s: %w", a, err)
		}
	}
	return run, nil
}
