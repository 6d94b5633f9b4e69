package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// runResult is what Agent.Run returned.
type runResult struct {
	sum Summary
	err error
}

// runAsync runs a.Run(ctx) on a goroutine of its own.
func runAsync(ctx context.Context, a *Agent) <-chan runResult {
	done := make(chan runResult, 1)
	go func() { s, err := a.Run(ctx); done <- runResult{s, err} }()
	return done
}

func fill(q *queue, n int, block bool) bool {
	b := q.get()
	var e wire.BatchEncoder
	e.Reset(b.buf[:0])
	for range n {
		e.Append(1, 0, 100, make([]byte, 100))
	}
	return q.push(b, &e, wire.CodecNone, n, 1, block)
}

func TestQueue(t *testing.T) {
	q := newQueue(3000, 4096)
	for i := range 2 {
		if !fill(q, 10, false) {
			t.Fatalf("push %d refused", i)
		}
	}
	if fill(q, 10, false) {
		t.Fatal("push over the byte limit accepted")
	}
	st := q.stats()
	if st.dropped != 10 || st.lastSeq != 2 || st.pending != 2 {
		t.Fatalf("after drop: %+v", st)
	}
	if b := q.at(2); b == nil || b.seq != 2 || q.at(3) != nil || q.at(0) != nil {
		t.Fatal("at() does not find batches by sequence")
	}
	pushed := make(chan bool)
	go func() { pushed <- fill(q, 10, true) }()
	select {
	case <-pushed:
		t.Fatal("blocking push did not wait for room")
	case <-time.After(50 * time.Millisecond):
	}
	q.ack(1)
	if !<-pushed {
		t.Fatal("blocking push failed after room was made")
	}
	if q.at(1) != nil || q.at(3) == nil || q.stats().ackedPackets != 10 {
		t.Fatalf("after ack(1): %+v", q.stats())
	}
	q.ack(99) // beyond what exists: clamps
	if st := q.stats(); st.pending != 0 || st.acked != 3 {
		t.Fatalf("after ack(99): %+v", st)
	}
}

// TestResendsFromFirstUnacknowledged runs an agent against a scripted
// collector that acknowledges part of what it got and drops the
// connection; the agent must come back with the same instance and send
// the first unacknowledged batch first.
func TestResendsFromFirstUnacknowledged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 3000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := New(Config{Collectors: []string{ln.Addr().String()}, Name: "t1", ReadFile: path, BatchBytes: 16 << 10, Insecure: true,
		BackoffMin: time.Millisecond, BackoffMax: 10 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(context.Background(), a)

	accept := func() (net.Conn, *wire.FrameReader, wire.Hello) {
		t.Helper()
		c, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fr := wire.NewFrameReader(c, wire.Limits{})
		h, p, err := fr.Next()
		if err != nil || h.Type != wire.TypeHello {
			t.Fatalf("hello: %s %v", h.Type, err)
		}
		hl, err := wire.ParseHello(p)
		if err != nil {
			t.Fatal(err)
		}
		return c, fr, hl
	}
	nextBatch := func(fr *wire.FrameReader) wire.Batch {
		t.Helper()
		for {
			h, p, err := fr.Next()
			if err != nil {
				t.Fatal(err)
			}
			if h.Type == wire.TypeBatch {
				b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}
	}

	c1, fr1, h1 := accept()
	c1.Write(wire.AppendWelcome(nil, wire.Welcome{MaxFrame: 16 << 20}))
	for want := uint64(1); want <= 3; want++ {
		if b := nextBatch(fr1); b.Seq != want {
			t.Fatalf("first connection: batch %d, want %d", b.Seq, want)
		}
	}
	c1.Write(wire.AppendAck(nil, 2))
	testutil.EventuallyTrue(t, 5*time.Second, "the agent read ack 2", func() bool { return a.q.stats().acked >= 2 })
	c1.Close()

	c2, fr2, h2 := accept()
	defer c2.Close()
	if h2.Instance != h1.Instance {
		t.Fatal("reconnect changed the instance id")
	}
	c2.Write(wire.AppendWelcome(nil, wire.Welcome{LastSeq: 2, MaxFrame: 16 << 20}))
	var packets uint64
	for want := uint64(3); ; want++ {
		b := nextBatch(fr2)
		if b.Seq != want {
			t.Fatalf("after reconnect: batch %d, want %d", b.Seq, want)
		}
		packets += uint64(b.Count)
		c2.Write(wire.AppendAck(nil, b.Seq))
		if st := a.q.stats(); st.lastSeq == b.Seq && st.queuedPackets == 3000 {
			break
		}
	}
	select {
	case r := <-done:
		if r.err != nil || r.sum.Read != 3000 || r.sum.Acked != 3000 || r.sum.Reconnects != 1 {
			t.Fatalf("summary %+v, err %v", r.sum, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not finish after everything was acknowledged")
	}
	// Batch 3 at least went out twice; every batch is acknowledged.
	if st, last := a.Stats(), a.q.stats().lastSeq; st.BatchesResent == 0 || st.BatchesSent != last || st.BatchesAcked != last ||
		st.UnackedBatches != 0 || st.UnackedBytes != 0 || st.Connected || len(st.Interfaces) != 1 || st.Interfaces[0].Captured != 3000 {
		t.Errorf("Stats %+v: want batches resent, %d sent and acknowledged, nothing unacknowledged, 3000 captured", st, last)
	}
	if packets == 0 {
		t.Fatal("nothing resent")
	}
}

func TestRejectIsFatal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	gen.WriteFile(path, gen.FileConfig{Count: 10, Mix: gen.Mix64})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		wire.NewFrameReader(c, wire.Limits{}).Next()
		c.Write(wire.AppendReject(nil, "agent name taken"))
	}()
	a, err := New(Config{Collectors: []string{ln.Addr().String()}, Name: "x", ReadFile: path, Insecure: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.Run(ctx)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want the rejection", err, ctx.Err())
	}
	t.Log(err)
}

// TestTruncatedFileDeliversWhatWasRead replays a file cut in the middle
// of a record into a real in-process collector: the error names the file
// and the offset, and every whole packet before it is acknowledged.
func TestTruncatedFileDeliversWhatWasRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cut.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 1000, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	// 24-byte header, then records of 16+64 bytes: keep 700 and a half.
	if err := os.Truncate(path, 24+700*80+40); err != nil {
		t.Fatal(err)
	}
	rc := startCollector(t, collector.Config{Insecure: true})
	a, err := New(Config{Collectors: []string{rc.addr}, Name: "cut", ReadFile: path, Logger: quiet, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", 24+700*80)) {
		t.Fatalf("err = %v; want the file name and offset %d", err, 24+700*80)
	}
	if sum.Read != 700 || sum.Acked != 700 {
		t.Fatalf("summary %+v; want 700 read and acknowledged", sum)
	}
	if got := rc.core.Counters.Packets.Load(); got != 700 {
		t.Fatalf("collector wrote %d packets, want 700", got)
	}
	// Plain TCP: --checksum auto keeps the CRC on every batch.
	if got := rc.core.Counters.Unchecked.Load(); got != 0 {
		t.Errorf("collector received %d unchecked batches from a plain TCP agent, want 0", got)
	}
}

// TestChecksumChoice: --checksum auto leaves the CRC out only inside
// TLS without a spool; always and never are what they say; never is
// refused over UDP.
func TestChecksumChoice(t *testing.T) {
	tlsConf := &tls.Config{}
	for _, tt := range []struct {
		cfg       Config
		unchecked bool
	}{
		{Config{Insecure: true}, false},
		{Config{TLS: tlsConf}, true},
		{Config{TLS: tlsConf, Spool: "/x"}, false},
		{Config{TLS: tlsConf, Checksum: ChecksumAlways}, false},
		{Config{Insecure: true, Checksum: ChecksumNever}, true},
		{Config{Insecure: true, Transport: TransportUDP}, false},
	} {
		if got := tt.cfg.unchecked(); got != tt.unchecked {
			t.Errorf("%+v: unchecked %v, want %v", tt.cfg, got, tt.unchecked)
		}
	}
	for _, s := range []string{"auto", "always", "never"} {
		if c, err := ParseChecksum(s); err != nil || c.String() != s {
			t.Errorf("ParseChecksum(%q) = %v, %v", s, c, err)
		}
	}
	if _, err := ParseChecksum("sometimes"); err == nil {
		t.Error("ParseChecksum accepted sometimes")
	}
	cfg := Config{Name: "a", Collectors: []string{"127.0.0.1:1"}, ReadFile: "x.pcap", Insecure: true, Transport: TransportUDP, Checksum: ChecksumNever}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("Validate of UDP with --checksum never: %v, want a checksum error", err)
	}
}

// TestTooManyInterfacesInFile: a pcapng file with more interfaces than
// an agent may declare ends the replay with an error naming the file
// and the limit (no panic), after delivering the packets before it.
func TestTooManyInterfacesInFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "many.pcapng")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewNgWriter(f, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range wire.MaxInterfaces + 1 {
		if _, err := w.AddInterface(pcapfile.Interface{LinkType: 1, SnapLen: 1500}); err != nil {
			t.Fatal(i, err)
		}
	}
	for _, ifx := range []int{0, 1, wire.MaxInterfaces - 1, wire.MaxInterfaces} {
		if err := w.WritePacket(ifx, 1_700_000_000_000_000_000, 60, make([]byte, 60)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rc := startCollector(t, collector.Config{Insecure: true})
	a, err := New(Config{Collectors: []string{rc.addr}, Name: "many", ReadFile: path, Logger: quiet, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	sum, err := a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), fmt.Sprintf("at most %d interfaces", wire.MaxInterfaces)) {
		t.Fatalf("err = %v; want the file and the interface limit", err)
	}
	if sum.Read != 3 || sum.Acked != 3 {
		t.Fatalf("summary %+v; want the 3 packets before the 1025th interface read and acknowledged", sum)
	}
}

// TestReplayAhead: a replay over TCP without a spool reads at most
// replayAhead beyond what the sender has begun to write (a larger queue
// only let its reader run ahead of the collector, in fresh memory
// faulted in per run), its unacknowledged window still Config.QueueBytes;
// live capture, UDP and a spool have no such bound.
func TestReplayAhead(t *testing.T) {
	dir := t.TempDir()
	in, spool := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "spool")
	writePcap(t, in, 1, []int{60})
	batch := int64(wire.HeaderSize + wire.BatchHeaderSize + 8<<20 + DefaultSnapLen + wire.RecordMaxOverhead)
	for _, tc := range []struct {
		name  string
		cfg   Config
		ahead int64
	}{
		{"replay", Config{ReadFile: in}, replayAhead},
		{"replay larger queue", Config{ReadFile: in, QueueBytes: 256 << 20}, replayAhead},
		{"replay large batches", Config{ReadFile: in, BatchBytes: 8 << 20, QueueBytes: 256 << 20}, 4 * batch},
		{"replay with spool", Config{ReadFile: in, Spool: spool}, 0},
		{"replay over udp", Config{ReadFile: in, Transport: TransportUDP}, 0},
		{"live capture", Config{Interfaces: []string{"lo"}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.Collectors, c.Name, c.Insecure, c.Logger = []string{"127.0.0.1:1"}, "q", true, quiet
			a, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			if a.q.ahead != tc.ahead {
				t.Errorf("read-ahead %d, want %d", a.q.ahead, tc.ahead)
			}
			if want := cmp.Or(c.QueueBytes, DefaultQueueBytes); a.q.limit != want {
				t.Errorf("queue limit %d, want %d", a.q.limit, want)
			}
		})
	}
}

// TestQueueAhead: with a read-ahead bound a blocking push waits while
// the batches not yet begun to be written would pass it, and goes on once
// the sender begins one; acknowledged or not does not matter.
func TestQueueAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newQueue(1<<20, 4096)
		q.ahead = 3000 // two batches of 10 records (TestQueue)
		for i := range 2 {
			if !fill(q, 10, true) {
				t.Fatalf("push %d refused", i)
			}
		}
		done := make(chan bool, 1)
		go func() { done <- fill(q, 10, true) }()
		synctest.Wait()
		select {
		case <-done:
			t.Fatal("third push did not wait for the sender")
		default:
		}
		q.beginWrite(q.at(1))
		q.endWrite()
		synctest.Wait()
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("third push refused")
			}
		default:
			t.Fatal("third push still waits after the sender began the first batch")
		}
		if st := q.stats(); st.acked != 0 || st.pending != 3 {
			t.Fatalf("stats %+v: want 3 pending, none acknowledged", st)
		}
		// Without block a push ignores the bound (live capture has none).
		q.beginWrite(q.at(3))
		q.endWrite()
		if !fill(q, 10, false) {
			t.Fatal("push without block refused below the limit")
		}
	})
}
