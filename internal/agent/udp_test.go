package agent

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/sockopt"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// udpCollector is an in-process collector's UDP transport on a
// loopback port.
type udpCollector struct {
	core *collector.Core
	srv  *collector.UDPServer
	addr string
	dir  string
	log  *testutil.Buffer
	stop func() // stops the server and closes the core; idempotent
}

// startUDPCollector starts a UDP collector for cfg (Dir, Logger and
// Insecure set here) on a free loopback port and stops it in t.Cleanup.
func startUDPCollector(t *testing.T, cfg collector.Config) *udpCollector {
	t.Helper()
	return startUDPCollectorAt(t, cfg, "127.0.0.1:0")
}

// startUDPCollectorAt is startUDPCollector on addr.
func startUDPCollectorAt(t *testing.T, cfg collector.Config, addr string) *udpCollector {
	t.Helper()
	uc := &udpCollector{dir: filepath.Join(t.TempDir(), "out"), log: &testutil.Buffer{}}
	cfg.Store.Dir, cfg.Logger, cfg.Insecure = uc.dir, slog.New(slog.NewTextHandler(uc.log, nil)), true
	core, err := collector.NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", ua)
	if err != nil {
		t.Fatal(err)
	}
	uc.core, uc.srv, uc.addr = core, collector.NewUDPServer(core), conn.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- uc.srv.Serve(ctx, conn) }()
	var once sync.Once
	uc.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-served; err != nil {
				t.Errorf("UDP Serve: %v", err)
			}
			if err := core.Close(); err != nil {
				t.Errorf("closing the core: %v", err)
			}
		})
	}
	t.Cleanup(func() {
		uc.stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", uc.log.String())
		}
	})
	return uc
}

// readPackets reads every packet of a pcap or pcapng file, or of every
// file in a directory.
func readPackets(t *testing.T, path string) []pcapfile.Packet {
	t.Helper()
	paths := []string{path}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		paths, _ = filepath.Glob(filepath.Join(path, "*"))
		paths = slices.DeleteFunc(paths, func(p string) bool { return capturetest.IsIndex(p) })
	}
	var out []pcapfile.Packet
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		r, err := pcapfile.NewReader(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		for {
			pk, err := r.ReadPacket()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			out = append(out, pk)
		}
		f.Close()
	}
	return out
}

// samePackets compares timestamps, lengths and bytes.
func samePackets(t *testing.T, got, want []pcapfile.Packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d packets, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Timestamp != w.Timestamp || g.OrigLen != w.OrigLen || !bytes.Equal(g.Data, w.Data) {
			t.Fatalf("packet %d: ts %d len %d/%d, want ts %d len %d/%d", i, g.Timestamp, len(g.Data), g.OrigLen, w.Timestamp, len(w.Data), w.OrigLen)
		}
	}
}

// runUDPAgent replays path over UDP to addr and returns its summary.
func runUDPAgent(t *testing.T, addr, name, path string, cfg Config) Summary {
	t.Helper()
	lb := &testutil.Buffer{}
	cfg.Collectors, cfg.Name, cfg.ReadFile, cfg.Insecure, cfg.Transport = []string{addr}, name, path, true, TransportUDP
	cfg.Logger = slog.New(slog.NewTextHandler(lb, nil))
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sum, err := a.Run(ctx)
	if err != nil || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v); log:\n%s", err, ctx.Err(), lb.String())
	}
	return sum
}

// TestUDPReplay: every packet of a replay, jumbo frames and 64 KiB ones
// too, reaches the file whole over loopback UDP when nothing is lost;
// a packet too big for a datagram travels in pieces.
func TestUDPReplay(t *testing.T) {
	for _, codec := range []string{"none", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			sp, err := compress.ParseSpec(codec)
			if err != nil {
				t.Fatal(err)
			}
			testUDPReplay(t, sp)
		})
	}
}

func testUDPReplay(t *testing.T, sp compress.Spec) {
	uc := startUDPCollector(t, collector.Config{})
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 3000, Mix: gen.MixMixed, Seed: 7, Nanosecond: true}); err != nil {
		t.Fatal(err)
	}
	want := readPackets(t, path)
	var alone, big uint64
	for i := range want {
		if len(want[i].Data)+wire.HeaderSize+wire.BatchHeaderSize+wire.RecordMaxOverhead > 1500-28 {
			alone++
		}
		if len(want[i].Data) > 9000 {
			big++
		}
	}
	// Paced: without root the receive buffers stay at the system's
	// limit, which a burst of 64 KiB of pieces overflows.
	sum := runUDPAgent(t, uc.addr, "u1", path, Config{MTU: 1500, MaxRate: 5000, Compress: sp})
	if sum.Read != 3000 || sum.Sent != 3000 || sum.Acked != 0 || sum.Unacked != 0 || sum.SendErrors != 0 || big == 0 {
		t.Errorf("summary %+v; want 3000 read and sent (%d of over 9000 bytes)", sum, big)
	}
	t.Logf("agent: %s", sum)
	// A packet that does not fit alone travels alone, in pieces; some of
	// those batches may still fit once shorter headers are counted (or
	// compressed).
	if sum.Pieced == 0 || sum.Pieced > alone || sum.Pieces < 2*sum.Pieced {
		t.Errorf("%d batches sent in %d pieces, want 1..%d in at least twice as many", sum.Pieced, sum.Pieces, alone)
	}
	waitUDP(t, uc, sum.Datagrams)
	uc.stop()
	got := uc.srv.AgentCounts()["u1"]
	if got.Lost != 0 || got.Reordered != 0 || got.Duplicates != 0 || got.Malformed != 0 || got.Incomplete != 0 ||
		got.Received == 0 || got.Pieces != sum.Pieces || got.Reassembled != sum.Pieced {
		t.Errorf("collector counts %+v, want no loss and the agent's %d pieces of %d batches", got, sum.Pieces, sum.Pieced)
	}
	samePackets(t, readPackets(t, filepath.Join(uc.dir, "u1")), want)
}

// waitEnded waits until agent name's session has ended: at its
// goodbye, or, if both of its goodbyes were lost, at the peer timeout.
// Then the collector has read all it will of the agent's datagrams.
func (uc *udpCollector) waitEnded(t *testing.T, name string) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, func() error {
		for _, st := range uc.core.AgentStats() {
			if st.Name == name {
				if st.Connected {
					return fmt.Errorf("agent %s still has a session", name)
				}
				return nil
			}
		}
		return fmt.Errorf("agent %s never had a session", name)
	})
}

// waitUDP waits until the collector has handled n datagrams.
func waitUDP(t *testing.T, uc *udpCollector, n uint64) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		if got := uc.srv.Counters.Datagrams.Load(); got < n {
			return fmt.Errorf("collector handled %d datagrams of %d", got, n)
		}
		return nil
	})
}

// faultyPath relays datagrams from an agent to a collector over
// loopback, dropping, swapping and duplicating batch and piece
// datagrams on a fixed pattern, and records what it did. Datagrams that
// carry a hello are passed in order, untouched.
type faultyPath struct {
	in, out *net.UDPConn

	mu        sync.Mutex
	forwarded uint64 // datagrams sent on to the collector
	byes      int
	counts    collector.UDPAgentCounts // what the collector must count, Lost and Incomplete aside
	dropped   []uint64                 // sequence numbers dropped
	top       uint64                   // highest sequence number delivered
	delivered [][]byte                 // batch payloads in the order written
	partial   map[uint64]*partialBatch // batches in pieces, by first number
	largest   int                      // bytes of the largest datagram
	done      chan struct{}            // closed after the second bye
}

// partialBatch is a batch in pieces as the path delivered it.
type partialBatch struct {
	frame []byte
	got   map[uint32]bool
	count uint32
}

// sequenced returns a datagram's batch or piece frame and its number.
func sequenced(d []byte) (h wire.Header, p []byte, seq uint64, hello bool) {
	for rest := d; len(rest) > 0; {
		fh, fp, next, err := wire.NextFrame(rest, wire.Limits{})
		if err != nil {
			panic(err)
		}
		rest = next
		switch fh.Type {
		case wire.TypeBatch:
			h, p, seq = fh, fp, binary.LittleEndian.Uint64(fp)
		case wire.TypePiece:
			pc, err := wire.ParsePiece(fp, wire.Limits{}.MaxPieceTotal())
			if err != nil {
				panic(err)
			}
			h, p, seq = fh, fp, pc.Seq()
		case wire.TypeHello:
			hello = true
		}
	}
	return h, p, seq, hello
}

func newFaultyPath(t *testing.T, to string) *faultyPath {
	t.Helper()
	in, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	raddr, _ := net.ResolveUDPAddr("udp", to)
	out, err := net.DialUDP("udp", nil, raddr)
	if err != nil {
		t.Fatal(err)
	}
	sockopt.SetBuffers(in, 4<<20, 0)
	sockopt.SetBuffers(out, 0, 4<<20)
	fp := &faultyPath{in: in, out: out, done: make(chan struct{}), partial: map[uint64]*partialBatch{}}
	go fp.run()
	t.Cleanup(func() { in.Close(); out.Close() })
	return fp
}

// forward sends d on; h and p are its batch or piece frame, if any.
func (fp *faultyPath) forward(d []byte, h wire.Header, p []byte, seq uint64) {
	fp.out.Write(d)
	fp.forwarded++
	if p == nil {
		return
	}
	fp.counts.Received++
	fp.top = max(fp.top, seq)
	if h.Type == wire.TypeBatch {
		fp.delivered = append(fp.delivered, p)
		return
	}
	fp.counts.Pieces++
	pc, _ := wire.ParsePiece(p, wire.Limits{}.MaxPieceTotal())
	pb := fp.partial[pc.First]
	if pb == nil {
		pb = &partialBatch{frame: make([]byte, pc.Total), got: map[uint32]bool{}, count: pc.Count}
		fp.partial[pc.First] = pb
	}
	copy(pb.frame[pc.Offset():], pc.Data)
	if pb.got[pc.Index] = true; len(pb.got) == int(pb.count) {
		fp.delivered = append(fp.delivered, pb.frame[wire.HeaderSize:])
		fp.counts.Reassembled++
		delete(fp.partial, pc.First)
	}
}

// want returns what the collector must have counted: a drop after the
// last delivered datagram is invisible to it, and a batch of which
// some pieces arrived but not all is incomplete.
func (fp *faultyPath) want() collector.UDPAgentCounts {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	c := fp.counts
	for _, s := range fp.dropped {
		if s < fp.top {
			c.Lost++
		}
	}
	c.Incomplete = uint64(len(fp.partial))
	return c
}

// forwardRaw forwards d, finding its batch or piece frame.
func (fp *faultyPath) forwardRaw(d []byte) {
	h, p, seq, _ := sequenced(d)
	fp.forward(d, h, p, seq)
}

func (fp *faultyPath) run() {
	buf := make([]byte, 64<<10)
	var held []byte
	n := 0 // batch and piece datagrams seen
	for {
		k, err := fp.in.Read(buf)
		if err != nil {
			return
		}
		d := bytes.Clone(buf[:k])
		h, p, seq, hello := sequenced(d)
		if h.Type == 0 && bytes.Equal(d, wire.AppendBye(nil)) {
			fp.byes++
		}
		fp.mu.Lock()
		fp.largest = max(fp.largest, k)
		switch {
		case p == nil || hello:
			if p == nil && held != nil && fp.byes > 0 { // the end: in order now
				fp.forwardRaw(held)
				held = nil
			}
			fp.forward(d, h, p, seq)
		case n%7 == 6:
			fp.dropped = append(fp.dropped, seq)
		case held != nil:
			fp.forward(d, h, p, seq)
			fp.forwardRaw(held)
			fp.counts.Reordered++
			held = nil
		case n%5 == 2:
			held = d
		default:
			fp.forward(d, h, p, seq)
			if n%11 == 0 {
				fp.out.Write(d)
				fp.forwarded++
				fp.counts.Received++
				fp.counts.Duplicates++
				if h.Type == wire.TypePiece {
					fp.counts.Pieces++
				}
			}
		}
		if p != nil && !hello {
			n++
		}
		if fp.byes == 2 {
			close(fp.done)
		}
		fp.mu.Unlock()
	}
}

// TestUDPLossCountedExactly runs a replay through a path that drops
// every 7th batch or piece datagram, swaps others and duplicates some:
// the collector's counts equal what the path did, no datagram is over
// the MTU, and the file holds exactly the packets of the delivered
// batches (a batch in pieces once its last piece is delivered), in
// arrival order.
func TestUDPLossCountedExactly(t *testing.T) {
	for _, mix := range []gen.Mix{gen.MixIMIX, gen.MixMixed} {
		t.Run(string(mix), func(t *testing.T) { testUDPLossCountedExactly(t, mix) })
	}
}

func testUDPLossCountedExactly(t *testing.T, mix gen.Mix) {
	const mtu = 1280
	uc := startUDPCollector(t, collector.Config{})
	fp := newFaultyPath(t, uc.addr)
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 4000, Mix: mix, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	sum := runUDPAgent(t, fp.in.LocalAddr().String(), "lossy", path, Config{MTU: mtu, MaxRate: 20000})
	if sum.Sent != 4000 || sum.SendErrors != 0 || sum.Pieced == 0 {
		t.Fatalf("summary %+v", sum)
	}
	select {
	case <-fp.done:
	case <-time.After(30 * time.Second): // generous: CI runs this under -race beside the e2e tests
		fp.mu.Lock()
		byes, forwarded := fp.byes, fp.forwarded
		fp.mu.Unlock()
		t.Fatalf("the path did not see the agent's goodbye: %d byes, %d datagrams forwarded; summary %+v", byes, forwarded, sum)
	}
	want := fp.want()
	fp.mu.Lock()
	forwarded, delivered := fp.forwarded, fp.delivered
	fp.mu.Unlock()
	waitUDP(t, uc, forwarded)
	uc.stop()
	if want.Lost == 0 || want.Reordered == 0 || want.Duplicates == 0 || want.Reassembled == 0 || want.Incomplete == 0 {
		t.Fatalf("the path did too little: %+v", want)
	}
	if fp.largest > mtu-28 {
		t.Errorf("a datagram of %d bytes, over the MTU's %d", fp.largest, mtu-28)
	}
	got := uc.srv.AgentCounts()["lossy"]
	if got != want {
		t.Errorf("collector counts %+v,\nthe path did        %+v", got, want)
	}
	var wantPkts []pcapfile.Packet
	for _, p := range delivered {
		b, err := wire.ParseBatch(0, p, wire.BatchLimits{})
		if err != nil {
			t.Fatal(err)
		}
		it := b.Iter(1)
		var r wire.Record
		for it.Next(&r) == nil {
			wantPkts = append(wantPkts, pcapfile.Packet{Timestamp: r.Timestamp, OrigLen: r.OrigLen, Data: r.Data})
		}
	}
	samePackets(t, readPackets(t, filepath.Join(uc.dir, "lossy")), wantPkts)
	t.Logf("path: %+v; %d packets of 4000 written", want, len(wantPkts))
}

// TestUDPCollectorStartsLate: a collector that starts while an agent
// streams learns it from its next hello (within a second), counts what
// came before as from an unknown source and lost, and writes the rest:
// received and lost add up to every batch the agent sent.
func TestUDPCollectorStartsLate(t *testing.T) {
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	addr := probe.LocalAddr().String()
	probe.Close() // free again; nothing listens there until the collector starts
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 30000, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Collectors: []string{addr}, Name: "late", ReadFile: path, Insecure: true, Transport: TransportUDP,
		MaxRate: 15000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := runAsync(context.Background(), a)
	testutil.Eventually(t, 10*time.Second, func() error { // streaming to nowhere
		if n := a.Stats().Datagrams; n < 200 {
			return fmt.Errorf("the agent sent %d datagrams, want 200 before the collector starts", n)
		}
		return nil
	})
	uc := startUDPCollectorAt(t, collector.Config{}, addr)
	var r runResult
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not finish")
	}
	if r.err != nil || r.sum.Read != 30000 {
		t.Fatalf("agent: %+v, %v", r.sum, r.err)
	}
	uc.waitEnded(t, "late")
	uc.stop()
	got := uc.srv.AgentCounts()["late"]
	batches := a.q.stats().lastSeq
	if got.Received == 0 || got.Lost == 0 || got.Received+got.Lost != batches || uc.srv.Counters.Unknown.Load() == 0 {
		t.Errorf("collector counts %+v, %d from unknown sources; want received + lost = %d batches sent", got, uc.srv.Counters.Unknown.Load(), batches)
	}
	if n := uc.core.Counters.Sessions.Load(); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
}

// TestUDPRejected: a collector that wants a token refuses an agent
// without it, and the agent stops with the reason.
func TestUDPRejected(t *testing.T) {
	uc := startUDPCollector(t, collector.Config{Token: "0123456789abcdef0123"})
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 20000, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Collectors: []string{uc.addr}, Name: "nt", ReadFile: path, Insecure: true, Transport: TransportUDP,
		MaxRate: 5000, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.Run(ctx)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "token required") || ctx.Err() != nil {
		t.Fatalf("Run = %v (ctx %v), want the rejection", err, ctx.Err())
	}
}

func TestUDPConfig(t *testing.T) {
	base := Config{Collectors: []string{"127.0.0.1:1"}, ReadFile: "x", Name: "n", Transport: TransportUDP, Insecure: true}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"ok", func(*Config) {}, ""},
		{"not insecure", func(c *Config) { c.Insecure = false }, "UDP is plaintext"},
		{"spool", func(c *Config) { c.Spool = "/tmp/x" }, "UDP acknowledges nothing"},
		{"mtu too small", func(c *Config) { c.MTU = 100 }, "MTU 100 out of range"},
		{"mtu with tcp", func(c *Config) { c.Transport, c.MTU = TransportTCP, 1500 }, "UDP transport only"},
		{"bad transport", func(c *Config) { c.Transport = "sctp" }, `transport "sctp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
		})
	}
}

// TestUDPPipelineAllocsPerPacket is TestPipelineAllocsPerPacket over
// UDP: what a larger replay allocates more, per additional packet, in
// agent and collector together. IMIX packets travel about three to a
// datagram, so one allocation per datagram would be 0.3 per packet; what
// remains is time-driven (a read deadline waking the collector's reader
// to commit).
func TestUDPPipelineAllocsPerPacket(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	perPacket := pipelineAllocsPerPacket(t, func() func(path string, n uint64) {
		// A short peer timeout: unpaced, some datagrams are lost, at times
		// both goodbyes, and then the session ends at the timeout.
		uc := startUDPCollector(t, collector.Config{Heartbeat: 200 * time.Millisecond, PeerTimeout: time.Second})
		return func(path string, n uint64) {
			sum := runUDPAgent(t, uc.addr, "allocs", path, Config{QueueBytes: 1 << 20})
			if sum.Sent != n {
				t.Fatalf("replay of %d packets: %+v", n, sum)
			}
			uc.waitEnded(t, "allocs")
		}
	})
	if perPacket > 0.03 {
		t.Errorf("%.4f allocations per packet in the steady state, want about 0", perPacket)
	}
}
