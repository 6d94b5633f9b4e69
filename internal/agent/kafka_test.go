package agent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/kafkaconn"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// kafkaTimeout bounds every wait of these tests.
const kafkaTimeout = 90 * time.Second

// kafkaAgent returns the Config of an agent replaying src to topic.
func kafkaAgent(b *kafkatest.Broker, topic, name, src string) agent.Config {
	return agent.Config{Kafka: &kafkaconn.Config{Brokers: []string{b.Addr}, Topic: topic, Partitions: 3},
		Name: name, ReadFile: src, StatsInterval: 200 * time.Millisecond,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// genFile writes count IMIX packets of stream to a file and returns
// its path.
func genFile(t *testing.T, count uint64, stream uint32) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: uint64(stream)}); err != nil {
		t.Fatal(err)
	}
	return path
}

func runAgent(t *testing.T, cfg agent.Config, wrap func(a *agent.Agent)) agent.Summary {
	t.Helper()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		wrap(a)
	}
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	sum, err := a.Run(ctx)
	if err != nil {
		t.Fatalf("agent: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("agent did not finish within %v: %v", kafkaTimeout, sum)
	}
	return sum
}

// topicRecords are what the topic holds, parsed.
type topicRecords struct {
	batches  []uint64       // batch sequence numbers in topic order
	packets  uint64         // packets of all batches, copies included
	stats    int            // Stats records
	largest  int            // bytes of the largest record (key, value, headers)
	versions map[string]int // records by their info header's version ("" none)
}

// consume reads topic until its batches hold packets packets of
// distinct batches, and checks every record with kafkarec.ParseRecord.
func consume(t *testing.T, b *kafkatest.Broker, topic, name string, packets uint64) topicRecords {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxPartitionBytes(kafkaconn.CreatedMaxMessageBytes), kgo.BrokerMaxReadBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	tr := topicRecords{versions: map[string]int{}}
	var instance [16]byte
	seen := map[uint64]uint64{} // seq -> packets
	var distinct uint64
	for distinct < packets {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("topic %s: %d of %d packets within %v", topic, distinct, packets, kafkaTimeout)
		}
		if errs := fs.Errors(); len(errs) > 0 {
			t.Fatalf("fetch: %v", errs)
		}
		for _, r := range fs.Records() {
			rec, err := kafkarec.ParseRecord(r, wire.Limits{})
			if err != nil {
				t.Fatalf("record at offset %d: %v", r.Offset, err)
			}
			if rec.Agent != name || rec.Hello.Token != "" {
				t.Fatalf("record of %q (token %q), want %q without a token", rec.Agent, rec.Hello.Token, name)
			}
			if instance == ([16]byte{}) {
				instance = rec.Hello.Instance
			} else if rec.Hello.Instance != instance {
				t.Fatalf("two instances in one run's records")
			}
			if rec.InfoErr != nil {
				t.Fatalf("record at offset %d: %v", r.Offset, rec.InfoErr)
			}
			tr.versions[rec.Info.Version]++
			size := len(r.Key) + len(r.Value)
			for _, h := range r.Headers {
				size += len(h.Key) + len(h.Value)
			}
			tr.largest = max(tr.largest, size)
			if rec.Type == wire.TypeStats {
				tr.stats++
				continue
			}
			bt, err := wire.ParseBatch(rec.Flags, rec.Payload, wire.BatchLimits{})
			if err != nil {
				t.Fatalf("batch at offset %d: %v", r.Offset, err)
			}
			tr.batches = append(tr.batches, bt.Seq)
			tr.packets += uint64(bt.Count)
			if _, ok := seen[bt.Seq]; !ok {
				seen[bt.Seq] = uint64(bt.Count)
				distinct += uint64(bt.Count)
			}
		}
	}
	return tr
}

// TestKafkaReplay: a replay produced straight to Kafka arrives as one
// record per batch, every batch exactly once and in order, with stats
// records beside them; acknowledged is what Kafka acknowledged.
func TestKafkaReplay(t *testing.T) {
	b := kafkatest.Start(t)
	const count = 20_000
	cfg := kafkaAgent(b, "replay", "k1", genFile(t, count, 1))
	cfg.BatchBytes = 64 << 10
	cfg.Version = "9.9.9 0123456789ab"
	sum := runAgent(t, cfg, nil)
	if sum.Read != count || sum.Acked != count || sum.Unacked != 0 || sum.Reconnects != 0 {
		t.Fatalf("summary %+v, want %d read and acknowledged", sum, count)
	}
	tr := consume(t, b, "replay", "k1", count)
	for i, seq := range tr.batches {
		if seq != uint64(i+1) {
			t.Fatalf("batch %d of the topic has sequence %d: %v", i, seq, tr.batches)
		}
	}
	if tr.packets != count || tr.stats == 0 {
		t.Fatalf("%d packets in %d batches and %d stats records, want %d packets once and stats", tr.packets, len(tr.batches), tr.stats, count)
	}
	if n := tr.versions[cfg.Version]; len(tr.versions) != 1 || n != len(tr.batches)+tr.stats {
		t.Fatalf("versions in the records' info headers: %v, want %q in all %d", tr.versions, cfg.Version, len(tr.batches)+tr.stats)
	}
	t.Logf("%d batches, %d stats records", len(tr.batches), tr.stats)
}

// TestKafkaBatchFitsTopic: on a topic with a small max.message.bytes the
// agent lowers its batch size so that every record fits; a topic too
// small for a minimal batch, or for a packet of the snaplen, refuses
// the agent at New.
func TestKafkaBatchFitsTopic(t *testing.T) {
	b := kafkatest.Start(t)
	create := func(topic string, maxBytes int) {
		t.Helper()
		v := strconv.Itoa(maxBytes)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := kadm.NewClient(b.Client()).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	const limit = 40_000
	create("small", limit)
	create("tiny", 3000)
	src := genFile(t, 5000, 2)

	t.Run("capped", func(t *testing.T) {
		for _, c := range []agent.Config{
			func() agent.Config { c := kafkaAgent(b, "small", "capped", src); c.SnapLen = 2048; return c }(),
		} {
			sum := runAgent(t, c, nil)
			if sum.Acked != 5000 {
				t.Fatalf("acknowledged %d of 5000", sum.Acked)
			}
			tr := consume(t, b, "small", "capped", 5000)
			if tr.largest > limit-kafkaconn.RecordOverhead {
				t.Fatalf("a record of %d bytes on a topic of %d", tr.largest, limit)
			}
			if len(tr.batches) < 5000*300/limit {
				t.Fatalf("%d batches: not capped", len(tr.batches))
			}
			t.Logf("%d batches, largest record %d bytes", len(tr.batches), tr.largest)
		}
	})
	for _, tt := range []struct {
		name, topic string
		snap        int
		want        string
	}{
		{"no batch fits", "tiny", 1500, "too small for a batch"},
		{"snaplen does not fit", "small", 0, "lower SnapLen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := kafkaAgent(b, tt.topic, "refused", src)
			c.SnapLen = tt.snap
			_, err := agent.New(c)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error saying %q", err, tt.want)
			}
			t.Log(err)
		})
	}
}

// TestKafkaBrokerRestart: the broker killed while an agent replays with
// a spool and a small queue, and restarted: the agent waits, keeps
// what Kafka did not acknowledge (spilling to the spool), and every
// batch is in the topic once Kafka acknowledged all.
func TestKafkaBrokerRestart(t *testing.T) {
	b := kafkatest.Start(t)
	const count = 60_000
	cfg := kafkaAgent(b, "restart", "r1", genFile(t, count, 3))
	cfg.BatchBytes = 16 << 10
	cfg.QueueBytes = 1 << 20
	cfg.Spool = t.TempDir()
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*kafkaTimeout)
	defer cancel()
	type result struct {
		sum agent.Summary
		err error
	}
	done := make(chan result, 1)
	go func() {
		sum, err := a.Run(ctx)
		done <- result{sum, err}
	}()
	testutil.EventuallyTrue(t, kafkaTimeout, "some batches acknowledged", func() bool { return a.Stats().Acked > 0 })
	b.Kill()
	// Down long enough for the queue to fill: the rest waits in the spool.
	testutil.EventuallyTrue(t, kafkaTimeout, "the queue full beyond its memory", func() bool {
		return a.Stats().UnackedBytes > cfg.QueueBytes
	})
	ackedDown := a.Stats().Acked
	b.Restart()
	r := <-done
	if r.err != nil || r.sum.Acked != count || r.sum.Dropped != 0 {
		t.Fatalf("agent across a broker restart: %+v, %v; want %d acknowledged, none dropped", r.sum, r.err, count)
	}
	tr := consume(t, b, "restart", "r1", count)
	t.Logf("acknowledged %d before the kill took effect; %d batch records for %d batches; resend rounds %d",
		ackedDown, len(tr.batches), countDistinct(tr.batches), r.sum.Reconnects)
}

func countDistinct(seqs []uint64) int {
	m := map[uint64]bool{}
	for _, s := range seqs {
		m[s] = true
	}
	return len(m)
}

// TestKafkaResendDuplicates: an answer lost after Kafka stored the
// record (reported as an error) makes the agent produce again from the
// first unacknowledged batch, so the topic holds some batches twice; a
// writer drops the copies by the marks in its files, and the file holds
// every packet of the reference once, in order.
func TestKafkaResendDuplicates(t *testing.T) {
	b := kafkatest.Start(t)
	const count = 10_000
	src := genFile(t, count, 4)
	cfg := kafkaAgent(b, "dups", "d1", src)
	cfg.BatchBytes = 16 << 10
	var failed atomic.Bool
	sum := runAgent(t, cfg, func(a *agent.Agent) {
		agent.WrapKafkaSend(a, func(send func(string, []byte, []byte, []byte, func(error))) func(string, []byte, []byte, []byte, func(error)) {
			var n atomic.Int64
			return func(name string, hello, info, frame []byte, done func(error)) {
				lose := frame[2] == byte(wire.TypeBatch) && n.Add(1) == 5 && !failed.Load()
				send(name, hello, info, frame, func(err error) {
					if lose && err == nil {
						failed.Store(true)
						err = errors.New("injected: the answer was lost")
					}
					done(err)
				})
			}
		})
	})
	if !failed.Load() || sum.Acked != count || sum.Reconnects == 0 {
		t.Fatalf("summary %+v (answer lost: %v): want every packet acknowledged after a resend round", sum, failed.Load())
	}
	tr := consume(t, b, "dups", "d1", count)
	if dup := len(tr.batches) - countDistinct(tr.batches); dup == 0 {
		t.Fatalf("no batch in the topic twice (%d records): the resend did not happen", len(tr.batches))
	}

	dir := t.TempDir()
	w, err := serve.New(serve.Config{Role: serve.RoleWriter, Kafka: kafkaconn.Config{Brokers: []string{b.Addr}, Topic: "dups"}, Group: "w",
		Collector: collector.Config{Store: store.Config{Dir: dir, Shared: true}}, Logger: cfg.Logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	want := capturetest.ReadFile(t, src)
	testutil.Eventually(t, kafkaTimeout, func() error {
		if n := w.Core().Counters.Packets.Load(); n < uint64(len(want)) {
			return fmt.Errorf("%d of %d packets written", n, len(want))
		}
		return nil
	})
	cancel()
	if err := <-wdone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	got, _ := capturetest.ReadDir(t, filepath.Join(dir, "d1"))
	if len(got) != len(want) {
		t.Fatalf("%d packets in the files, want %d (duplicates kept?)", len(got), len(want))
	}
	for i := range want {
		if got[i].TS != want[i].TS || !bytes.Equal(got[i].Data, want[i].Data) {
			t.Fatalf("packet %d differs from the reference", i)
		}
	}
	t.Logf("%d batch records for %d batches; the files hold every packet once", len(tr.batches), countDistinct(tr.batches))
}

// TestKafkaRecordKey: an agent given --kafka-record-key (the topic's
// key, or its own derived from it) signs its records, and a writer with
// the topic's key writes them all, also while the topic's key changes
// (a writer with the new key and the previous one takes the records of
// agents on either); an agent without a key produces to the same topic
// (the brokers let it), and the writer refuses, counted, every one of
// its records; a writer given an agent's key does not start.
func TestKafkaRecordKey(t *testing.T) {
	b := kafkatest.Start(t)
	keyFile := filepath.Join(t.TempDir(), "record.key")
	if err := os.WriteFile(keyFile, []byte("c2VjcmV0LXJlY29yZC1rZXktb2YtdGhlLXNpdGU=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	topicKey, _ := os.ReadFile(keyFile)
	tk, err := kafkarec.ParseRecordKey(topicKey)
	if err != nil {
		t.Fatal(err)
	}
	ownFile := filepath.Join(t.TempDir(), "own.key")
	line, _ := tk.AgentKeyFile("own")
	if err := os.WriteFile(ownFile, line, 0o600); err != nil {
		t.Fatal(err)
	}
	// The topic's key changes: an agent on the new key, while the
	// writer takes both (--kafka-record-key-previous).
	newKeyFile := filepath.Join(t.TempDir(), "new.key")
	if err := os.WriteFile(newKeyFile, []byte("the-next-record-key-of-the-site\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const count, ownCount, newCount = 2000, 700, 300
	var signed agent.Config
	for i, a := range []struct {
		name, key string
		count     uint64
	}{{"signed", keyFile, count}, {"unsigned", "", 500}, {"own", ownFile, ownCount}, {"new", newKeyFile, newCount}} {
		cfg := kafkaAgent(b, "keyed", a.name, genFile(t, a.count, uint32(5+i)))
		cfg.Kafka.RecordKeyFile = a.key
		if sum := runAgent(t, cfg, nil); sum.Acked != a.count {
			t.Fatalf("agent %s: %+v", a.name, sum)
		}
		if i == 0 {
			signed = cfg
		}
	}
	if _, err := serve.New(serve.Config{Role: serve.RoleWriter, Kafka: kafkaconn.Config{Brokers: []string{b.Addr}, Topic: "keyed", RecordKeyFile: ownFile}, Group: "w2",
		Collector: collector.Config{Store: store.Config{Dir: t.TempDir(), Shared: true}}, Logger: signed.Logger}); !errors.Is(err, kafkarec.ErrBadKeyFile) {
		t.Errorf("a writer given an agent's key: %v, want ErrBadKeyFile", err)
	}
	dir := t.TempDir()
	w, err := serve.New(serve.Config{Role: serve.RoleWriter, Kafka: kafkaconn.Config{Brokers: []string{b.Addr}, Topic: "keyed",
		RecordKeyFile: newKeyFile, PreviousRecordKeyFile: keyFile}, Group: "w",
		Collector: collector.Config{Store: store.Config{Dir: dir, Shared: true}}, Logger: signed.Logger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	testutil.Eventually(t, kafkaTimeout, func() error {
		parts := w.Writer().Partitions()
		for _, p := range parts {
			if p.Lag != 0 {
				return fmt.Errorf("partition %d: lag %d", p.Partition, p.Lag)
			}
		}
		if n := w.Core().Counters.Packets.Load(); len(parts) == 0 || n < count+ownCount+newCount {
			return fmt.Errorf("%d of %d packets written, %d partitions", n, count+ownCount+newCount, len(parts))
		}
		return nil
	})
	cancel()
	if err := <-wdone; err != nil {
		t.Fatalf("writer: %v", err)
	}
	if n := w.Core().Counters.Packets.Load(); n != count+ownCount+newCount {
		t.Errorf("%d packets written, want the signed agents' %d", n, count+ownCount+newCount)
	}
	if n := w.Writer().Counters.Unauthenticated.Load(); n == 0 {
		t.Errorf("no record of the unsigned agent refused")
	}
	// The agents on the old key's records, not the new agent's.
	wc := &w.Writer().Counters
	if prev, taken := wc.PreviousKey.Load(), wc.Records.Load()-wc.Unauthenticated.Load(); prev == 0 || prev >= taken {
		t.Errorf("%d records counted as taken under the previous key, of %d taken: want some, not all", prev, taken)
	}
	if _, err := os.Stat(filepath.Join(dir, "unsigned")); err == nil {
		t.Errorf("the unsigned agent has files")
	}
}

// TestKafkaTopicRecreated: the topic deleted and created again while an
// agent produces straight to Kafka: the agent's producer, which never
// adopts the topic's new ID by itself, forgets the topic and produces
// to the new one; the agent sends everything and exits.
func TestKafkaTopicRecreated(t *testing.T) {
	b := kafkatest.Start(t)
	const topic, count = "reborn", 20_000
	src := genFile(t, count, 7)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(t.TempDir(), "in.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := kafkaAgent(b, topic, "r1", fifo)
	cfg.Kafka.Partitions = 1
	cfg.BatchBytes = 16 << 10
	type result struct {
		sum agent.Summary
		err error
	}
	done := make(chan result, 1)
	ctx, cancel := context.WithTimeout(context.Background(), kafkaTimeout)
	defer cancel()
	go func() {
		a, err := agent.New(cfg)
		if err != nil {
			done <- result{err: err}
			return
		}
		sum, err := a.Run(ctx)
		done <- result{sum, err}
	}()
	in, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	half := len(data) / 2
	if _, err := in.Write(data[:half]); err != nil {
		t.Fatal(err)
	}
	adm := kadm.NewClient(b.Client())
	ends := func() int64 {
		o, err := adm.ListEndOffsets(ctx, topic)
		if err != nil {
			return 0
		}
		var n int64
		o.Each(func(l kadm.ListedOffset) { n += max(l.Offset, 0) })
		return n
	}
	testutil.Eventually(t, kafkaTimeout, func() error {
		if n := ends(); n < 10 {
			return fmt.Errorf("%d records in the topic", n)
		}
		return nil
	})
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, kafkaTimeout, func() error {
		ts, err := adm.ListTopics(ctx)
		if err == nil && ts.Has(topic) {
			err = errors.New("topic still listed")
		}
		return err
	})
	b.CreateTopic(topic, 1)
	if _, err := in.Write(data[half:]); err != nil {
		t.Fatal(err)
	}
	in.Close()
	r := <-done
	if r.err != nil || r.sum.Acked != count {
		t.Fatalf("agent: %v, summary %+v: want every packet acknowledged", r.err, r.sum)
	}
	if n := ends(); n == 0 {
		t.Errorf("the new topic holds no record")
	}
}
