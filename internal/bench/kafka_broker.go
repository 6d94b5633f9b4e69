package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
)

// benchBroker is the Kafka a bench runs against: one it started
// (kb set, its CPU measured) or one given.
type benchBroker struct {
	addrs  []string
	pid    int // the broker's JVM; 0 when not ours
	libs   string
	kb     *kafkatest.Process // nil when not ours
	cl     *kgo.Client
	adm    *kadm.Client
	topics []string // to delete at close
}

// startBroker checks that Kafka's jars (with kafka-tools) and java are
// there, and starts a broker in dir unless brokers are given. close
// stops what it started.
func startBroker(dir string, brokers []string) (*benchBroker, error) {
	libs, err := kafkatest.Libs()
	if err != nil {
		return nil, err
	}
	if m, _ := filepath.Glob(filepath.Join(libs, "kafka-tools-[0-9]*.jar")); len(m) == 0 {
		return nil, fmt.Errorf("no kafka-tools jar (ProducerPerformance) in %s: run scripts/kafka.sh", libs)
	}
	b := &benchBroker{addrs: brokers, libs: libs}
	if len(brokers) == 0 {
		kb, err := kafkatest.Launch(kafkatest.Options{Dir: dir})
		if err != nil {
			return nil, fmt.Errorf("starting a Kafka broker: %w", err)
		}
		b.kb, b.addrs, b.pid = kb, []string{kb.Addr}, kb.PID()
	}
	if b.cl, err = kgo.NewClient(kgo.SeedBrokers(b.addrs...)); err != nil {
		b.close()
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	b.adm = kadm.NewClient(b.cl)
	return b, nil
}

func (b *benchBroker) close() error {
	b.deleteTopics()
	if b.cl != nil {
		b.cl.Close()
	}
	if b.kb != nil {
		return b.kb.Close()
	}
	return nil
}

// brokerList is the brokers as a --kafka flag.
func (b *benchBroker) brokerList() string { return strings.Join(b.addrs, ",") }

// cpu returns the broker's user + system time so far, 0 when it is not
// ours.
func (b *benchBroker) cpu() (time.Duration, error) {
	if b.pid == 0 {
		return 0, nil
	}
	return procCPU(b.pid)
}

// clockTick is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procCPU returns utime + stime of process pid (its threads included,
// its children not), from /proc/PID/stat.
func procCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing one (field 3, state, comes first).
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, x := range f[11:13] { // utime, stime: fields 14 and 15
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * clockTick, nil
}

// ensureTopic creates topic as pcapsync would (max.message.bytes
// 17 MiB) with partitions, and waits for its leaders.
func (b *benchBroker) ensureTopic(ctx context.Context, topic string, partitions int32) error {
	_, err := kafkaconn.EnsureTopic(ctx, b.cl, kafkaconn.Config{Brokers: b.addrs, Topic: topic, Partitions: partitions})
	return err
}

// dropTopic marks topic to be deleted at close: deleting it at once
// would free its pages in the middle of a later round (see freshPages).
func (b *benchBroker) dropTopic(topic string) { b.topics = append(b.topics, topic) }

// deleteTopics deletes the topics dropTopic named, ignoring errors: the
// broker's disk is the only thing at stake.
func (b *benchBroker) deleteTopics() {
	if len(b.topics) == 0 || b.adm == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.adm.DeleteTopics(ctx, b.topics...)
	b.topics = nil
}

// lag returns the records of topic not yet committed by group, and the
// records in the topic.
func (b *benchBroker) lag(ctx context.Context, topic, group string) (behind, total int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return 0, 0, fmt.Errorf("listing end offsets: %w", err)
	}
	if err := ends.Error(); err != nil {
		return 0, 0, fmt.Errorf("listing end offsets: %w", err)
	}
	commits, err := b.adm.FetchOffsets(ctx, group)
	if err != nil {
		return 0, 0, fmt.Errorf("fetching the group's offsets: %w", err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		c, _ := commits.Lookup(o.Topic, o.Partition)
		behind += max(o.Offset-max(c.At, 0), 0)
		total += o.Offset
	})
	return behind, total, nil
}

// partitionEnds returns the end offset (records) of every partition of
// topic, by partition.
func (b *benchBroker) partitionEnds(ctx context.Context, topic string) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []int64
	ends.Each(func(o kadm.ListedOffset) {
		for int(o.Partition) >= len(out) {
			out = append(out, 0)
		}
		out[o.Partition] = o.Offset
	})
	return out, nil
}

// waitCaughtUp polls every 10 ms until group has committed every
// record of topic, and returns when it saw that; it fails after
// timeout.
func (b *benchBroker) waitCaughtUp(ctx context.Context, topic, group string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		behind, total, err := b.lag(ctx, topic, group)
		now := time.Now()
		if err == nil && behind == 0 && total > 0 {
			return now, nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d of %d records not committed by group %s", behind, total, group)
		}
		if now.After(deadline) {
			return now, fmt.Errorf("not caught up after %v: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return now, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// scrapeSum returns the sum, over its label sets, of metric name at
// http://addr/metrics.
func scrapeSum(ctx context.Context, addr, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("metrics at %s: %s", addr, resp.Status)
	}
	var sum float64
	found := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		i := strings.LastIndexByte(rest, ' ')
		v, err := strconv.ParseFloat(rest[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("metric %s: %w", name, err)
		}
		sum += v
		found = true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%w: %s at %s", errNoMetric, name, addr)
	}
	return sum, nil
}

var errNoMetric = errors.New("no such metric")

// pollUntil calls cond every 20 ms until it returns true, an error, p
// exits, or timeout passes.
func pollUntil(ctx context.Context, timeout time.Duration, what string, p *proc, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		last = err
		if p != nil && p.cmd.ProcessState == nil {
			// Exited but not yet reaped: /proc shows a zombie.
			if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid)); strings.Contains(string(st), ") Z") {
				p.wait()
				return fmt.Errorf("%s exited while waiting for %s: %s", p.name, what, p.stderr.String())
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v (last: %v)", what, timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
