package kafkaio

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/kafkarec/kafkarectest"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/kafkatest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// brokerTimeout bounds every wait of the writer's tests against the
// broker.
const brokerTimeout = 60 * time.Second

// TestWriterBroker runs the writer's tests against one real broker
// (one JVM start for all), each on a topic of its own.
func TestWriterBroker(t *testing.T) {
	b := kafkatest.Start(t)
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, b *kafkatest.Broker)
	}{
		{"forged seq jump", testForgedJump},
		{"flipped bytes", testFlippedBytes},
		{"record key", testRecordKey},
		{"rejected records release their locks", testRejectedUnlock},
		{"more agents than descriptors", testManyAgents},
		{"idle agents released", testIdleRelease},
		{"topic deleted and created again", testTopicRecreated},
		{"partitions added", testPartitionsAdded},
		{"agent version", testAgentVersion},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
	}
}

// testAgent is an agent whose records a test produces.
type testAgent struct {
	name  string
	hello []byte // its Hello frame, one Ethernet interface
}

func newTestAgent(name string, instance byte) testAgent {
	return testAgent{name: name, hello: kafkarectest.Hello(name, instance)}
}

// batch returns the record of batch seq of n 60-byte packets
// (kafkarectest.Batch).
func (a testAgent) batch(topic string, seq uint64, n int) *kgo.Record {
	return kafkarec.NewRecord(topic, a.name, a.hello, nil, kafkarectest.Batch(seq, n).Finish(seq))
}

// zbatch returns the record of batch seq of n 60-byte packets, its
// records compressed with zstd.
func (a testAgent) zbatch(t *testing.T, topic string, seq uint64, n int) *kgo.Record {
	t.Helper()
	e := kafkarectest.Batch(seq, n)
	enc, err := compress.NewEncoder(compress.Spec{Codec: compress.Zstd})
	if err != nil {
		t.Fatal(err)
	}
	frame, codec := enc.Compress(wire.CompressedFrame(nil), e.Records())
	if codec != wire.CodecZstd {
		t.Fatalf("batch not compressed (%s)", codec)
	}
	return kafkarec.NewRecord(topic, a.name, a.hello, nil, e.FinishCompressed(frame, seq, codec))
}

// produce produces recs in order and waits for the broker's acks.
func produce(t *testing.T, cl *kgo.Client, recs ...*kgo.Record) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("producing: %v", err)
	}
}

// lineCounter is a slog handler counting the records whose message
// holds a string, and keeping the last few messages.
type lineCounter struct {
	mu    sync.Mutex
	lines map[string]int
	all   int
}

func (c *lineCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *lineCounter) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lines == nil {
		c.lines = map[string]int{}
	}
	c.lines[r.Message]++
	c.all++
	return nil
}
func (c *lineCounter) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *lineCounter) WithGroup(string) slog.Handler      { return c }

// count returns how many messages held s.
func (c *lineCounter) count(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.lines {
		if strings.Contains(m, s) {
			n += k
		}
	}
	return n
}

// rig is a writer on a topic of the broker, writing a temporary root.
type rig struct {
	w    *Writer
	core *collector.Core
	dir  string
	log  *lineCounter
}

// startWriter runs a writer of group "g" on topic with cfg's settings
// (Opts, Topic, Group, Core and Release set here) until the test ends.
func startWriter(t *testing.T, b *kafkatest.Broker, topic string, cfg WriterConfig) *rig {
	t.Helper()
	r := &rig{dir: t.TempDir(), log: &lineCounter{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	core, err := collector.NewCore(collector.Config{Store: store.Config{Dir: r.dir, Shared: true, Fsync: store.FsyncNever, Logger: quiet},
		Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	r.core = core
	cfg.Opts = []kgo.Opt{kgo.SeedBrokers(b.Addr)}
	cfg.Topic, cfg.Group, cfg.Core, cfg.Release = topic, "g", core, core.Store().Release
	cfg.Logger = slog.New(r.log)
	if r.w, err = NewWriter(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		core.Close()
	})
	return r
}

// committed waits until the writer committed n records of the topic's
// partitions, all of them consumed.
func (r *rig) committed(t *testing.T, n int64) {
	t.Helper()
	testutil.Eventually(t, brokerTimeout, func() error {
		var sum int64
		for _, p := range r.w.Partitions() {
			sum += max(p.Committed, 0)
		}
		if sum < n {
			return fmt.Errorf("%d of %d records committed", sum, n)
		}
		return nil
	})
}

// packets returns the packets the writer's core committed to files.
func (r *rig) packets() uint64 { return r.core.Counters.Packets.Load() }

// testAgentVersion: the version an InfoHeader gives shows in the
// core's AgentStats, a later one replaces it; a record whose InfoHeader
// cannot be read is written all the same, the version kept, and is
// logged once for the agent; records without one (a producer before the
// header) leave it as it is.
func testAgentVersion(t *testing.T, b *kafkatest.Broker) {
	const topic = "version"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	a := newTestAgent("v1", 1)
	with := func(seq uint64, info []byte) *kgo.Record {
		r := a.batch(topic, seq, 5)
		if info != nil {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: kafkarec.InfoHeader, Value: info})
		}
		return r
	}
	bad := append(wire.AppendHeader(nil, wire.TypeInfo, 0, 4), 1, wire.InfoVersion, 1, 0x07) // not printable
	rg := startWriter(t, b, topic, WriterConfig{})
	version := func() string {
		for _, st := range rg.core.AgentStats() {
			if st.Name == a.name {
				return st.Version
			}
		}
		return "(no agent)"
	}
	produce(t, cl, with(1, wire.AppendInfo(nil, &wire.Info{Version: "1.4.0"})), with(2, nil))
	rg.committed(t, 2)
	if got := version(); got != "1.4.0" {
		t.Fatalf("version %q after an InfoHeader of 1.4.0 and a record without one", got)
	}
	produce(t, cl, with(3, bad), with(4, bad))
	rg.committed(t, 4)
	if got, n := version(), rg.log.count("agent version unreadable"); got != "1.4.0" || n != 1 {
		t.Fatalf("after two unreadable InfoHeaders: version %q, %d warnings; want 1.4.0 kept, 1 warning", got, n)
	}
	produce(t, cl, with(5, wire.AppendInfo(nil, &wire.Info{Version: "1.5.0"})))
	rg.committed(t, 5)
	if got := version(); got != "1.5.0" {
		t.Fatalf("version %q after an InfoHeader of 1.5.0", got)
	}
	if got := rg.packets(); got != 25 {
		t.Errorf("%d packets written, want the 25 of all five records", got)
	}
}

// testForgedJump: a copy of an agent's latest record with its sequence
// number raised by a million and the checksum left stale is skipped and
// counted; every later real batch of the agent is written.
func testForgedJump(t *testing.T, b *kafkatest.Broker) {
	const topic = "forged"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	a := newTestAgent("a1", 1)
	var recs []*kgo.Record
	for seq := uint64(1); seq <= 5; seq++ {
		recs = append(recs, a.batch(topic, seq, 10))
	}
	forged := a.batch(topic, 5, 10)
	binary.LittleEndian.PutUint64(forged.Value[wire.HeaderSize:], 5+1_000_000)
	recs = append(recs, forged)
	for seq := uint64(6); seq <= 10; seq++ {
		recs = append(recs, a.batch(topic, seq, 10))
	}
	produce(t, cl, recs...)
	r := startWriter(t, b, topic, WriterConfig{})
	r.committed(t, int64(len(recs)))
	if got := r.packets(); got != 100 {
		t.Errorf("%d packets written, want the 100 of the 10 real batches", got)
	}
	if n := r.w.Counters.BadChecksums.Load(); n != 1 {
		t.Errorf("%d bad checksums counted, want 1", n)
	}
	if n := r.core.Counters.Duplicates.Load(); n != 0 {
		t.Errorf("%d batches dropped as duplicates, want none", n)
	}
	if n := r.log.count("skipping a record"); n != 1 {
		t.Errorf("%d skipped records logged, want 1", n)
	}
}

// testFlippedBytes: records whose value had one byte flipped past its
// frame header are counted and not written, whatever byte it was, the
// batch compressed (zstd) or not.
func testFlippedBytes(t *testing.T, b *kafkatest.Broker) {
	const topic = "flipped"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	a := newTestAgent("f1", 2)
	var recs []*kgo.Record
	flipped := 0
	for seq := uint64(1); seq <= 200; seq++ {
		rec := a.batch(topic, seq, 3)
		if seq%4 >= 2 {
			rec = a.zbatch(t, topic, seq, 3)
		}
		if seq%2 == 0 { // every other batch corrupt, at a byte that moves along the value
			i := wire.HeaderSize + int(seq*7)%(len(rec.Value)-wire.HeaderSize)
			rec.Value[i] ^= 1 << (seq % 8)
			flipped++
		}
		recs = append(recs, rec)
	}
	produce(t, cl, recs...)
	r := startWriter(t, b, topic, WriterConfig{})
	r.committed(t, int64(len(recs)))
	if got, want := r.packets(), uint64(3*(len(recs)-flipped)); got != want {
		t.Errorf("%d packets written, want %d: those of the intact batches only", got, want)
	}
	if n := r.w.Counters.BadChecksums.Load(); n != uint64(flipped) {
		t.Errorf("%d bad checksums counted, want %d", n, flipped)
	}
	if n := r.log.count("skipping a record"); n < 1 || n > 5 {
		t.Errorf("%d skipped records logged, want a few (at most one a second)", n)
	}
}

// testRecordKey: a writer with a record key writes what a Producer with
// the key produced, and what an agent's own key (derived from it)
// signed for that agent; it refuses, counted, a record without a MAC (a
// forged sequence jump), one signed with another key, a changed one and
// one of another agent signed with the agent's key.
func testRecordKey(t *testing.T, b *kafkatest.Broker) {
	const topic = "keyed"
	b.CreateTopic(topic, 1)
	key, err := kafkarec.NewRecordKey([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := kafkarec.NewRecordKey([]byte("fedcba9876543210fedcba9876543210"))
	p, err := kafkarec.NewProducer(kafkarec.ProducerConfig{Opts: []kgo.Opt{kgo.SeedBrokers(b.Addr)}, Topic: topic, MaxRecord: 1 << 20, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(time.Second)
	a := newTestAgent("k1", 3)
	send := func(rec *kgo.Record) {
		t.Helper()
		errc := make(chan error, 1)
		p.Send(a.name, rec.Headers[0].Value, nil, rec.Value, func(err error) { errc <- err })
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	send(a.batch(topic, 1, 10))
	cl := b.Client()
	unsigned := a.batch(topic, 1_000_000, 10) // a valid checksum, no MAC
	wrong := a.batch(topic, 2_000_000, 10)
	other.Sign(wrong)
	tampered := a.batch(topic, 2, 10)
	key.Sign(tampered)
	tampered.Value[len(tampered.Value)-1] ^= 1
	produce(t, cl, unsigned, wrong, tampered)
	send(a.batch(topic, 2, 10))
	send(a.batch(topic, 3, 10))
	// k1's own key, derived from the topic's: k1's batch is written,
	// one of agent k2 signed with it is refused.
	file, err := key.AgentKeyFile(a.name)
	if err != nil {
		t.Fatal(err)
	}
	own, err := kafkarec.ParseRecordKey(file)
	if err != nil {
		t.Fatal(err)
	}
	mine, forged := a.batch(topic, 4, 10), newTestAgent("k2", 4).batch(topic, 1, 10)
	own.Sign(mine)
	own.Sign(forged)
	produce(t, cl, mine, forged)
	r := startWriter(t, b, topic, WriterConfig{Key: key})
	r.committed(t, 8)
	if got := r.packets(); got != 40 {
		t.Errorf("%d packets written, want the 40 of the 4 signed batches", got)
	}
	if n := r.w.Counters.Unauthenticated.Load(); n != 4 {
		t.Errorf("%d unauthenticated records counted, want 4", n)
	}
}

// lockHeld reports whether agent name's lock below dir is held by an
// open file description (this process's or another's).
func lockHeld(t *testing.T, dir, name string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, store.LockDir, name+".lock"))
	if err != nil {
		return false // never taken
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return false
	}
	return true
}

// testRejectedUnlock: records whose hello the core refuses after the
// store took their agent (an instance of another agent) leave no agent
// locked.
func testRejectedUnlock(t *testing.T, b *kafkatest.Broker) {
	const topic = "rejected"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	owner := newTestAgent("owner", 4)
	recs := []*kgo.Record{owner.batch(topic, 1, 1)}
	const n = 50
	for i := range n {
		thief := newTestAgent(fmt.Sprintf("thief%d", i), 4) // owner's instance
		recs = append(recs, thief.batch(topic, 1, 1))
	}
	produce(t, cl, recs...)
	r := startWriter(t, b, topic, WriterConfig{})
	r.committed(t, int64(len(recs)))
	if got := r.w.Counters.BadRecords.Load(); got != n {
		t.Errorf("%d records skipped, want %d", got, n)
	}
	held := 0
	for i := range n {
		if lockHeld(t, r.dir, fmt.Sprintf("thief%d", i)) {
			held++
		}
	}
	if held > 0 {
		t.Errorf("%d of %d agents whose records were refused are still locked", held, n)
	}
	if !lockHeld(t, r.dir, "owner") {
		t.Errorf("the agent written is not locked")
	}
}

// testManyAgents: with RLIMIT_NOFILE lowered to 1024, a writer with its
// default bounds writes every packet of 2000 agents (each holding a
// lock and a file would need about 4000 descriptors).
func testManyAgents(t *testing.T, b *kafkatest.Broker) {
	const topic = "many"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	const agents, batches = 2000, 2
	var recs []*kgo.Record
	for seq := uint64(1); seq <= batches; seq++ {
		for i := range agents {
			a := newTestAgent(fmt.Sprintf("m%d", i), byte(i))
			a.hello = wire.AppendHello(nil, &wire.Hello{Name: a.name, Host: "h", Instance: [16]byte{byte(i), byte(i >> 8), 9},
				Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}})
			recs = append(recs, a.batch(topic, seq, 1))
		}
	}
	produce(t, cl, recs...)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = min(rl.Cur, 1024)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
	r := startWriter(t, b, topic, WriterConfig{BusyWait: 5 * time.Second})
	if m := r.w.cfg.MaxAgents; m >= agents {
		t.Fatalf("MaxAgents %d under RLIMIT_NOFILE %d: not below the %d agents", m, low.Cur, agents)
	}
	r.committed(t, int64(len(recs)))
	if got := r.packets(); got != agents*batches {
		t.Errorf("%d packets written, want %d", got, agents*batches)
	}
	if n := r.w.Counters.Restarts.Load(); n != 0 {
		t.Errorf("the writer started over %d times", n)
	}
}

// testIdleRelease: an agent without records for IdleRelease is given
// up (its lock released, its file published) while its partition stays.
func testIdleRelease(t *testing.T, b *kafkatest.Broker) {
	const topic = "idle"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	a := newTestAgent("i1", 5)
	produce(t, cl, a.batch(topic, 1, 1))
	r := startWriter(t, b, topic, WriterConfig{IdleRelease: 500 * time.Millisecond})
	r.committed(t, 1)
	testutil.Eventually(t, brokerTimeout, func() error {
		if lockHeld(t, r.dir, "i1") {
			return fmt.Errorf("agent still locked (%d released)", r.w.Counters.Released.Load())
		}
		return nil
	})
	produce(t, cl, a.batch(topic, 2, 1))
	r.committed(t, 2)
	if got := r.packets(); got != 2 {
		t.Errorf("%d packets written, want 2", got)
	}
}

// testTopicRecreated: the topic deleted under a writer, then created
// again: the writer logs its fetch errors a bounded number of times and
// writes the new topic's records within seconds, the producer (an
// ingest collector's, an agent's) produces to it again.
func testTopicRecreated(t *testing.T, b *kafkatest.Broker) {
	const topic = "recreated"
	b.CreateTopic(topic, 1)
	p, err := kafkarec.NewProducer(kafkarec.ProducerConfig{Opts: []kgo.Opt{kgo.SeedBrokers(b.Addr)}, Topic: topic, MaxRecord: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(time.Second)
	a := newTestAgent("r1", 6)
	send := func(seq uint64) error {
		rec := a.batch(topic, seq, 1)
		errc := make(chan error, 1)
		p.Send(a.name, a.hello, nil, rec.Value, func(err error) { errc <- err })
		return <-errc
	}
	if err := send(1); err != nil {
		t.Fatal(err)
	}
	r := startWriter(t, b, topic, WriterConfig{})
	r.committed(t, 1)
	adm := kadm.NewClient(b.Client())
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if _, err := adm.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, brokerTimeout, func() error {
		ts, err := adm.ListTopics(ctx)
		if err == nil && ts.Has(topic) {
			err = fmt.Errorf("topic still listed")
		}
		return err
	})
	// The topic stays deleted for a while (the outage, not a wait for
	// anything): what the writer logs meanwhile is bounded.
	time.Sleep(3 * time.Second)
	b.CreateTopic(topic, 1)
	created := time.Now()
	produce(t, b.Client(), a.batch(topic, 2, 1)) // a client that never knew the old topic
	testutil.Eventually(t, 30*time.Second, func() error {
		if got := r.packets(); got < 2 {
			return fmt.Errorf("%d of 2 packets written", got)
		}
		return nil
	})
	t.Logf("written %v after the topic was created again; %d log lines in all: %v", time.Since(created).Round(time.Millisecond), r.log.all, r.log.lines)
	if r.log.all > 100 {
		t.Errorf("%d log lines: want a bounded number", r.log.all)
	}
	testutil.Eventually(t, 30*time.Second, func() error { return send(3) })
	testutil.Eventually(t, 30*time.Second, func() error {
		if got := r.packets(); got < 3 {
			return fmt.Errorf("%d of 3 packets written", got)
		}
		return nil
	})
}

// testPartitionsAdded: records of a partition added to the topic under a
// writer are written within seconds (the writer refreshes the topic's
// metadata every few seconds, not every five minutes).
func testPartitionsAdded(t *testing.T, b *kafkatest.Broker) {
	const topic = "grown"
	b.CreateTopic(topic, 1)
	cl := b.Client()
	a := newTestAgent("p1", 7)
	produce(t, cl, a.batch(topic, 1, 1))
	r := startWriter(t, b, topic, WriterConfig{})
	r.committed(t, 1)
	adm := kadm.NewClient(b.Client())
	ctx, cancel := context.WithTimeout(context.Background(), brokerTimeout)
	defer cancel()
	if _, err := adm.CreatePartitions(ctx, 2, topic); err != nil {
		t.Fatal(err)
	}
	added := time.Now()
	moved := newTestAgent("p2", 8)
	manual := b.Client(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	rec := moved.batch(topic, 1, 1)
	rec.Partition = 2
	testutil.Eventually(t, 30*time.Second, func() error {
		pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer pcancel()
		return manual.ProduceSync(pctx, rec).FirstErr()
	})
	testutil.Eventually(t, 20*time.Second, func() error {
		if got := r.packets(); got < 2 {
			return fmt.Errorf("%d of 2 packets written", got)
		}
		return nil
	})
	t.Logf("the new partition's record written %v after the partitions were added", time.Since(added).Round(time.Millisecond))
}

// TestRestartPause: the pause before a start over doubles up to 30 s,
// and is back to 1 s after a membership that lasted a minute.
func TestRestartPause(t *testing.T) {
	var p restartPause
	var got []time.Duration
	for _, lasted := range []time.Duration{0, time.Second, 0, 0, 0, 0, 0, 0, healthyAfter, 0} {
		got = append(got, p.next(lasted))
	}
	s := time.Second
	want := []time.Duration{s, 2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s, s, 2 * s}
	if !slices.Equal(got, want) {
		t.Errorf("pauses %v, want %v", got, want)
	}
}
