package redisfeed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

var testIfaces = []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}, {Name: "tun0", LinkType: 101, SnapLen: 200}}

// testBatch returns a decompressed batch of n compressible records, the
// way the collector passes it to a feed.
func testBatch(t testing.TB, seq uint64, n int) *wire.Batch {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	ts := int64(1767225600_000000000) + int64(seq)*1e9
	for i := range n {
		data := bytes.Repeat([]byte{byte(seq), byte(i)}, 40+i%300)
		e.Append(ts+int64(i)*1000, uint32(i%2), uint32(len(data)+i%3), data)
	}
	frame := e.Finish(seq)
	b, err := wire.ParseBatch(frame[3], frame[wire.HeaderSize:], wire.BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return &b
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newFeed(t testing.TB, cfg Config) *Feed {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	go f.Run(context.Background())
	for !f.ran.Load() { // so that a Close right away drains, as after a while
		runtime.Gosched()
	}
	t.Cleanup(func() { f.Close(context.Background()) })
	return f
}

func client(t testing.TB, url string) *redis.Client {
	t.Helper()
	opt, err := Options(url, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// follow reads the whole stream of agent.
func follow(t testing.TB, c *redis.Client, agent string) []Entry {
	t.Helper()
	var got []Entry
	err := Follow(t.Context(), c, FollowConfig{Key: Key(DefaultPrefix, agent), From: time.Hour, Idle: 300 * time.Millisecond, Block: 100 * time.Millisecond, Logger: quietLogger()},
		func(e *Entry) error {
			c := *e
			c.Ifaces = append([]wire.Interface(nil), e.Ifaces...)
			c.Batch.Records = bytes.Clone(e.Batch.Records)
			got = append(got, c)
			return nil
		})
	if err != nil {
		t.Fatalf("Follow: %v", err)
	}
	return got
}

// TestPublishFollow: every batch given to the feed comes back from the
// agent's stream, in order, with its interfaces, for every codec.
func TestPublishFollow(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.URL())
	for _, spec := range []string{"s2", "zstd", "zstd:9", "none"} {
		t.Run(spec, func(t *testing.T) {
			prefixAgent := "pf-" + spec
			f := newFeed(t, Config{URL: srv.URL(), Compress: mustSpec(t, spec)})
			var want []*wire.Batch
			for seq := uint64(1); seq <= 300; seq++ {
				b := testBatch(t, seq, 1+int(seq%20))
				want = append(want, b)
				ev := collector.BatchEvent{Agent: prefixAgent, Host: "h1", Ifaces: testIfaces, Batch: b}
				f.Batch(&ev)
				if seq%50 == 0 { // let the queue drain: no drops wanted here
					testutil.EventuallyTrue(t, 10*time.Second, "the queue drained", func() bool { return f.Counters.Published.Load() == seq })
				}
			}
			if err := f.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := f.Counters.Dropped.Load(); d != 0 || f.Counters.Published.Load() != 300 {
				t.Fatalf("published %d, dropped %d; want 300, 0", f.Counters.Published.Load(), d)
			}
			got := follow(t, c, prefixAgent)
			if len(got) != len(want) {
				t.Fatalf("read %d entries, want %d", len(got), len(want))
			}
			for i, e := range got {
				w := want[i]
				if e.Host != "h1" || len(e.Ifaces) != 2 || e.Ifaces[1] != testIfaces[1] {
					t.Fatalf("entry %d: host %q ifaces %v", i, e.Host, e.Ifaces)
				}
				if e.Batch.Seq != w.Seq || e.Batch.Count != w.Count || e.Batch.BaseTime != w.BaseTime || !bytes.Equal(e.Batch.Records, w.Records) {
					t.Fatalf("entry %d: batch seq %d count %d differs from seq %d count %d", i, e.Batch.Seq, e.Batch.Count, w.Seq, w.Count)
				}
			}
			raw, sent := f.Counters.RawBytes.Load(), f.Counters.SentBytes.Load()
			if spec == "none" && raw != sent || spec != "none" && sent*2 > raw {
				t.Errorf("%s: records %d bytes stored as %d", spec, raw, sent)
			}
		})
	}
}

// TestFollowLive: without From, Follow sees only what is added after it
// started, and Idle ends it.
func TestFollowLive(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.URL())
	f := newFeed(t, Config{URL: srv.URL()})
	publish := func(seq uint64) {
		ev := collector.BatchEvent{Agent: "live", Host: "h", Ifaces: testIfaces, Batch: testBatch(t, seq, 3)}
		f.Batch(&ev)
	}
	publish(1)
	testutil.EventuallyTrue(t, 10*time.Second, "1 batch published", func() bool { return f.Counters.Published.Load() == 1 })
	var seqs []uint64
	done := make(chan error)
	go func() {
		done <- Follow(t.Context(), c, FollowConfig{Key: Key(DefaultPrefix, "live"), Idle: time.Second, Block: 100 * time.Millisecond, Logger: quietLogger()},
			func(e *Entry) error { seqs = append(seqs, e.Batch.Seq); return nil })
	}()
	// Follow has its start (the stream's last entry) once it reads on.
	testutil.EventuallyTrue(t, 10*time.Second, "Follow reading", func() bool {
		return strings.Contains(c.ClientList(t.Context()).Val(), "cmd=xread")
	})
	publish(2)
	publish(3)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[2 3]" {
		t.Fatalf("followed %v, want [2 3]", seqs)
	}
}

// TestTrim: streams stay bounded, by length or by age.
func TestTrim(t *testing.T) {
	srv := redistest.Start(t)
	c := client(t, srv.URL())
	ctx := t.Context()
	push := func(f *Feed, agent string, n int) {
		base := f.Counters.Published.Load()
		for i := range n {
			ev := collector.BatchEvent{Agent: agent, Host: "h", Ifaces: testIfaces, Batch: testBatch(t, uint64(i+1), 1)}
			f.Batch(&ev)
			if want := base + uint64(i) + 1; i%32 == 31 { // let the queue drain: no drops wanted here
				testutil.EventuallyTrue(t, 10*time.Second, "the queue drained", func() bool { return f.Counters.Published.Load() == want })
			}
		}
	}
	byLen := newFeed(t, Config{URL: srv.URL(), MaxLen: 50})
	push(byLen, "bylen", 1000)
	byLen.Close(ctx)
	// "~" trims whole nodes of 100 entries (stream-node-max-entries).
	if n := c.XLen(ctx, Key(DefaultPrefix, "bylen")).Val(); n < 50 || n > 250 || byLen.Counters.Published.Load() != 1000 {
		t.Errorf("maxlen 50: %d entries of %d published", n, byLen.Counters.Published.Load())
	}
	byAge := newFeed(t, Config{URL: srv.URL(), MaxAge: 300 * time.Millisecond})
	push(byAge, "byage", 500)
	testutil.EventuallyTrue(t, 10*time.Second, "500 batches published", func() bool { return byAge.Counters.Published.Load() == 500 })
	time.Sleep(400 * time.Millisecond) // the entries' age is the subject: all now older than MaxAge
	push(byAge, "byage", 1)
	byAge.Close(ctx)
	if n := c.XLen(ctx, Key(DefaultPrefix, "byage")).Val(); n > 101 {
		t.Errorf("max age 300ms: %d entries left 400ms after 500 were added", n)
	}
}

// TestRedisDown: with Redis gone, Batch still returns at once and the
// feed drops and counts; once Redis is back, the feed publishes again
// and counts a reconnect.
func TestRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	f := newFeed(t, Config{URL: srv.URL(), Timeout: 500 * time.Millisecond})
	seq := uint64(0)
	push := func(n int) time.Duration {
		var worst time.Duration
		for range n {
			seq++
			ev := collector.BatchEvent{Agent: "down", Host: "h", Ifaces: testIfaces, Batch: testBatch(t, seq, 5)}
			start := time.Now()
			f.Batch(&ev)
			worst = max(worst, time.Since(start))
			time.Sleep(time.Millisecond) // the batches' pace: a steady flow while Redis is down, not a burst

		}
		return worst
	}
	push(20)
	testutil.EventuallyTrue(t, 10*time.Second, "20 batches published", func() bool { return f.Counters.Published.Load() == 20 })
	srv.Kill()
	if worst := push(300); worst > 50*time.Millisecond {
		t.Errorf("Batch took %v with Redis down", worst)
	}
	testutil.EventuallyTrue(t, 10*time.Second, "a batch dropped", func() bool { return f.Counters.Dropped.Load() > 0 })
	srv.Restart()
	testutil.EventuallyTrue(t, 10*time.Second, "publishing again", func() bool { push(1); return f.Counters.Published.Load() > 20 })
	if r := f.Counters.Reconnects.Load(); r != 1 {
		t.Errorf("reconnects %d, want 1", r)
	}
	f.Close(context.Background())
	c := f.Counters.Published.Load() + f.Counters.Dropped.Load()
	if c != seq {
		t.Errorf("published %d + dropped %d = %d, want every batch given (%d)", f.Counters.Published.Load(), f.Counters.Dropped.Load(), c, seq)
	}
}

// TestQueueFull: a feed whose Redis does not answer never blocks Batch;
// what does not fit the queue is dropped and counted.
func TestQueueFull(t *testing.T) {
	f := newFeed(t, Config{URL: "redis://127.0.0.1:1", QueueBytes: 4096, Timeout: 200 * time.Millisecond})
	b := testBatch(t, 1, 20)
	start := time.Now()
	for range 10000 {
		ev := collector.BatchEvent{Agent: "full", Host: "h", Ifaces: testIfaces, Batch: b}
		f.Batch(&ev)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("10000 Batch calls took %v", d)
	}
	f.Close(context.Background())
	if got := f.Counters.Dropped.Load(); got != 10000 {
		t.Errorf("dropped %d of 10000 batches for an absent Redis", got)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{URL: "redis://localhost:6379/0"}, true},
		{Config{URL: "unix:///run/redis.sock"}, true},
		{Config{}, false},
		{Config{URL: "http://x"}, false},
		{Config{URL: "redis://x", MaxLen: 5, MaxAge: time.Second}, false},
		{Config{URL: "redis://x", MaxLen: -1}, false},
		{Config{URL: "redis://x", Compress: &compress.Spec{Codec: compress.Auto}}, false},
		{Config{URL: "redis://x", Compress: &compress.Spec{Codec: compress.LZ4}}, false},
		{Config{URL: "redis://x", Compress: &compress.Spec{Codec: compress.Zstd, Level: 3}}, true},
	} {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: Validate() = %v", tt.cfg, err)
		}
	}
}

// TestDecodeEntryBad: whatever the entry holds, decodeEntry returns
// ErrBadEntry or a batch that validates.
func TestDecodeEntryBad(t *testing.T) {
	good := goodEntry(t)
	dec, err := compress.NewDecoder(1<<20, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var e Entry
	if _, err := decodeEntry(&e, good, dec, nil, 1<<20); err != nil {
		t.Fatalf("good entry: %v", err)
	}
	mutate := func(field string, fn func([]byte) []byte) redis.XMessage {
		m := redis.XMessage{ID: "1-1", Values: map[string]any{}}
		for k, v := range good.Values {
			m.Values[k] = v
		}
		if fn == nil {
			delete(m.Values, field)
		} else {
			m.Values[field] = string(fn([]byte(good.Values[field].(string))))
		}
		return m
	}
	for name, m := range map[string]redis.XMessage{
		"no batch":        mutate(FieldBatch, nil),
		"no ifaces":       mutate(FieldIfaces, nil),
		"batch truncated": mutate(FieldBatch, func(b []byte) []byte { return b[:len(b)-1] }),
		"batch extra":     mutate(FieldBatch, func(b []byte) []byte { return append(b, 0) }),
		"batch crc":       mutate(FieldBatch, func(b []byte) []byte { b[len(b)-1]++; return b }),
		"ifaces cut":      mutate(FieldIfaces, func(b []byte) []byte { return b[:len(b)-2] }),
		"one iface":       mutate(FieldIfaces, func(b []byte) []byte { return wire.AppendIface(nil, 0, &testIfaces[0]) }),
		"iface index":     mutate(FieldIfaces, func(b []byte) []byte { return wire.AppendIface(nil, 1, &testIfaces[0]) }),
		"ifaces a batch":  mutate(FieldIfaces, func(b []byte) []byte { return []byte(good.Values[FieldBatch].(string)) }),
	} {
		if _, err := decodeEntry(&e, m, dec, nil, 1<<20); !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: %v, want ErrBadEntry", name, err)
		}
	}
}

// goodEntry is an entry as the feed writes it, zstd-compressed.
func goodEntry(t testing.TB) redis.XMessage {
	b := testBatch(t, 9, 30)
	enc, err := compress.NewEncoder(compress.Spec{Codec: compress.Zstd})
	if err != nil {
		t.Fatal(err)
	}
	frame, codec := enc.Compress(wire.CompressedFrame(nil), b.Records)
	frame = b.FinishFrame(frame, codec)
	var ifs []byte
	for i := range testIfaces {
		ifs = wire.AppendIface(ifs, uint32(i), &testIfaces[i])
	}
	return redis.XMessage{ID: "1-1", Values: map[string]any{FieldHost: "h", FieldIfaces: string(ifs), FieldBatch: string(frame)}}
}

// FuzzDecodeEntry: decodeEntry never panics, never decompresses past
// its limit, and what it accepts is a validated batch over the declared
// interfaces.
func FuzzDecodeEntry(f *testing.F) {
	good := goodEntry(f)
	gi, gb := []byte(good.Values[FieldIfaces].(string)), []byte(good.Values[FieldBatch].(string))
	f.Add(gi, gb)
	f.Add([]byte{}, []byte{})
	f.Add(gi, gb[:wire.HeaderSize+wire.BatchHeaderSize])
	f.Add(gi[:10], append(gb, 1, 2, 3))
	dec, err := compress.NewDecoder(1<<16, 1)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(dec.Close)
	f.Fuzz(func(t *testing.T, ifs, batch []byte) {
		var e Entry
		m := redis.XMessage{ID: "1-1", Values: map[string]any{FieldIfaces: string(ifs), FieldBatch: string(batch)}}
		_, err := decodeEntry(&e, m, dec, nil, 1<<16)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("error without ErrBadEntry: %v", err)
			}
			return
		}
		if e.Batch.Codec != wire.CodecNone || len(e.Batch.Records) > 1<<16 {
			t.Fatalf("accepted batch codec %s, %d bytes", e.Batch.Codec, len(e.Batch.Records))
		}
		if err := e.Batch.Validate(uint32(len(e.Ifaces))); err != nil {
			t.Fatalf("accepted batch does not validate: %v", err)
		}
	})
}

// mustSpec parses a compression setting.
func mustSpec(tb testing.TB, s string) *compress.Spec {
	tb.Helper()
	sp, err := compress.ParseSpec(s)
	if err != nil {
		tb.Fatal(err)
	}
	return &sp
}

// TestRunDrains: batches queued before Run are published when Run's
// context is already over: Run drains the queue before it returns.
func TestRunDrains(t *testing.T) {
	srv := redistest.Start(t)
	f, err := New(Config{URL: srv.URL(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 20; seq++ {
		ev := collector.BatchEvent{Agent: "drain", Host: "h", Ifaces: testIfaces, Batch: testBatch(t, seq, 3)}
		f.Batch(&ev)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.Counters.Published.Load(); got != 20 {
		t.Errorf("published %d batches, want 20 (dropped %d)", got, f.Counters.Dropped.Load())
	}
	if err := f.Close(context.Background()); err != nil {
		t.Errorf("Close after Run: %v", err)
	}
}
