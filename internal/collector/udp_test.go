package collector

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"

	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// testUDP is a Core and its UDPServer on a loopback port.
type testUDP struct {
	core *Core
	srv  *UDPServer
	addr *net.UDPAddr
	log  *testutil.Buffer
	stop func() // stops the server and closes the core; idempotent
}

// startUDP starts a UDPServer for cfg (Insecure set; Dir defaults to a
// temporary directory) and stops it in t.Cleanup.
func startUDP(t *testing.T, cfg Config) *testUDP {
	t.Helper()
	if cfg.Store.Dir == "" {
		cfg.Store.Dir = filepath.Join(t.TempDir(), "out")
	}
	cfg.Insecure = true
	lb := &testutil.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(lb, nil))
	core, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tu := &testUDP{core: core, srv: NewUDPServer(core), addr: conn.LocalAddr().(*net.UDPAddr), log: lb}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tu.srv.Serve(ctx, conn) }()
	stopped := false
	tu.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		core.Close()
	}
	t.Cleanup(func() {
		tu.stop()
		if t.Failed() {
			t.Logf("collector log:\n%s", lb.String())
		}
	})
	return tu
}

// udpAgent is a test agent's socket.
type udpAgent struct {
	t    *testing.T
	conn *net.UDPConn
	tu   *testUDP
}

func (tu *testUDP) dial(t *testing.T) *udpAgent {
	t.Helper()
	c, err := net.DialUDP("udp", nil, tu.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &udpAgent{t, c, tu}
}

// send sends datagram d and waits until the server has read it.
func (a *udpAgent) send(d []byte) {
	a.t.Helper()
	n := a.tu.srv.Counters.Datagrams.Load()
	if _, err := a.conn.Write(d); err != nil {
		a.t.Fatal(err)
	}
	testutil.EventuallyTrue(a.t, 5*time.Second, "the server read the datagram", func() bool { return a.tu.srv.Counters.Datagrams.Load() > n })
}

func udpBatch(seq uint64) []byte {
	p := batchPayload(seq, 10*int(seq-1), 10)
	return append(wire.AppendHeader(nil, wire.TypeBatch, 0, uint32(len(p))), p...)
}

func TestUDPServer(t *testing.T) {
	tu := startUDP(t, Config{})
	a := tu.dial(t)
	a.send(udpBatch(1)) // before any hello: unknown
	if got := tu.srv.Counters.Unknown.Load(); got != 1 {
		t.Fatalf("unknown %d, want 1", got)
	}
	a.send(wire.AppendHello(nil, hello("u1", 1)))
	for _, seq := range []uint64{1, 2, 4, 3, 3} {
		a.send(udpBatch(seq))
	}
	a.send(wire.AppendHello(nil, hello("u1", 1))) // repeated: same session
	a.send([]byte("GET / HTTP/1.0\r\n\r\n"))
	a.send(append(udpBatch(5), udpBatch(6)...))          // two batches: malformed
	a.send(append(udpBatch(7), 0xA7))                    // trailing byte: malformed
	a.send(append(udpBatch(8), wire.AppendPing(nil)...)) // batch and ping: fine
	a.send(wire.AppendBye(nil))
	a.send(wire.AppendBye(nil)) // a repeated goodbye is not counted unknown
	got := tu.srv.AgentCounts()["u1"]
	want := UDPAgentCounts{SeqCounts: SeqCounts{Received: 6, Lost: 3, Reordered: 1, Duplicates: 1}, Malformed: 3}
	if got != want {
		t.Errorf("agent counts %+v, want %+v", got, want)
	}
	if u, m := tu.srv.Counters.Unknown.Load(), tu.srv.Counters.Malformed.Load(); u != 1 || m != 3 {
		t.Errorf("unknown %d, malformed %d; want 1 and 3", u, m)
	}
	if n := tu.core.Counters.Sessions.Load(); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
	// The goodbye closed the file at once: 5 batches of 10 packets in it.
	pkts, files := readDir(t, filepath.Join(tu.core.Dir(), "u1"))
	if files != 1 || len(pkts) != 50 {
		t.Fatalf("%d files, %d packets; want 1 file with 50", files, len(pkts))
	}
	var firsts []byte
	for i := 0; i < len(pkts); i += 10 {
		firsts = append(firsts, pkts[i].Data[0])
	}
	if !slices.Equal(firsts, []byte{0, 10, 30, 20, 70}) {
		t.Errorf("batches in the file start with packets %v, want 0 10 30 20 70 (arrival order)", firsts)
	}
}

// TestUDPAgentRestart: a hello of a new instance, from the same address
// or another one, ends the old session (its gaps counted lost) and
// starts a new one; the old address is unknown from then on.
func TestUDPAgentRestart(t *testing.T) {
	for _, newPort := range []bool{false, true} {
		t.Run(map[bool]string{false: "same port", true: "new port"}[newPort], func(t *testing.T) {
			tu := startUDP(t, Config{})
			a := tu.dial(t)
			a.send(wire.AppendHello(nil, hello("r1", 1)))
			a.send(udpBatch(1))
			a.send(udpBatch(3))
			old := a
			if newPort {
				a = tu.dial(t)
			}
			a.send(wire.AppendHello(nil, hello("r1", 2)))
			a.send(udpBatch(1))
			a.send(udpBatch(2))
			if n := tu.core.Counters.Sessions.Load(); n != 2 {
				t.Fatalf("%d sessions, want 2", n)
			}
			if newPort {
				old.send(udpBatch(4))
				if u := tu.srv.Counters.Unknown.Load(); u != 1 {
					t.Errorf("the old address: %d unknown, want 1", u)
				}
			}
			tu.stop()
			got := tu.srv.AgentCounts()["r1"]
			if want := (UDPAgentCounts{SeqCounts: SeqCounts{Received: 4, Lost: 1}}); got != want {
				t.Errorf("agent counts %+v, want %+v", got, want)
			}
			if pkts, _ := readDir(t, filepath.Join(tu.core.Dir(), "r1")); len(pkts) != 40 {
				t.Errorf("%d packets written, want 40", len(pkts))
			}
		})
	}
}

// TestUDPPeerTimeout: a silent agent's session ends after the peer
// timeout; its later datagrams are unknown until it says hello again.
func TestUDPPeerTimeout(t *testing.T) {
	tu := startUDP(t, Config{Heartbeat: 100 * time.Millisecond, PeerTimeout: 300 * time.Millisecond})
	a := tu.dial(t)
	a.send(wire.AppendHello(nil, hello("p1", 1)))
	a.send(udpBatch(1))
	testutil.EventuallyTrue(t, 5*time.Second, "the session timed out", func() bool { return tu.core.Counters.PeerTimeouts.Load() == 1 })
	a.send(udpBatch(2))
	if got := tu.srv.Counters.Unknown.Load(); got != 1 {
		t.Fatalf("unknown %d after the timeout, want 1", got)
	}
	a.send(wire.AppendHello(nil, hello("p1", 1)))
	a.send(udpBatch(3))
	a.send(udpBatch(1)) // held before this session: a duplicate
	tu.stop()
	got := tu.srv.AgentCounts()["p1"]
	if want := (UDPAgentCounts{SeqCounts: SeqCounts{Received: 3, Lost: 1, Duplicates: 1}}); got != want {
		t.Errorf("agent counts %+v, want %+v", got, want)
	}
}

// TestUDPRejects: a wrong token is refused with a Reject no larger than
// the hello, nothing is written, and the source stays unknown.
func TestUDPRejects(t *testing.T) {
	tu := startUDP(t, Config{Token: "0123456789abcdef0123"})
	a := tu.dial(t)
	h := hello("t1", 1)
	h.Token = "wrong-token-wrong-token"
	hb := wire.AppendHello(nil, h)
	a.send(hb)
	a.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 2048)
	n, err := a.conn.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	hd, p, _, err := wire.NextFrame(buf[:n], wire.Limits{})
	if err != nil || hd.Type != wire.TypeReject || n > len(hb) {
		t.Fatalf("reply %s of %d bytes (hello %d): %v", hd.Type, n, len(hb), err)
	}
	if reason, _ := wire.ParseReject(p); reason != "wrong token" {
		t.Errorf("reason %q", reason)
	}
	a.send(udpBatch(1))
	if u, r := tu.srv.Counters.Unknown.Load(), tu.core.Counters.Rejected.Load(); u != 1 || r != 1 {
		t.Errorf("unknown %d, rejected %d; want 1 and 1", u, r)
	}
	tu.stop()
	if ents, _ := filepath.Glob(filepath.Join(tu.core.Dir(), "[^.]*")); len(ents) != 0 { // not the collector's own dot files
		t.Errorf("a rejected agent left %v", ents)
	}
}

func TestUDPNeedsInsecure(t *testing.T) {
	core := newCore(t, Config{})
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := NewUDPServer(core).Serve(context.Background(), conn); !errors.Is(err, ErrUDPInsecure) {
		t.Fatalf("Serve = %v, want ErrUDPInsecure", err)
	}
}

// withUDP serves UDP on ts's core too, until the test ends.
func (ts *testServer) withUDP(t *testing.T) *testUDP {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tu := &testUDP{core: ts.core, srv: NewUDPServer(ts.core), addr: conn.LocalAddr().(*net.UDPAddr), log: ts.log}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- tu.srv.Serve(ctx, conn) }()
	t.Cleanup(func() { cancel(); <-served }) // before startServer's cleanup closes the core
	return tu
}

// TestTLSAndUDP: with TLS configured and Insecure set, TCP keeps
// requiring TLS (a plain agent is refused) while UDP accepts agents.
func TestTLSAndUDP(t *testing.T) {
	p := pkitest.New(t)
	ts := startServer(t, Config{TLS: p.Server(t, false), Insecure: true})
	tu := ts.withUDP(t)
	if welcome, reason, _ := dial(t, ts.addr, nil, "plain1", "").reply(); welcome || !strings.Contains(reason, "requires TLS") {
		t.Fatalf("plain TCP: welcome %v, reason %q; want refused", welcome, reason)
	}
	if welcome, reason, err := dial(t, ts.addr, p.Client(t, p.CAFile, "", "", pkitest.ServerName), "tls1", "").reply(); !welcome {
		t.Fatalf("TLS: %q %v", reason, err)
	}
	a := tu.dial(t)
	a.send(wire.AppendHello(nil, hello("udp1", 'u')))
	a.send(udpBatch(1))
	if got := tu.srv.AgentCounts()["udp1"]; got.Received != 1 {
		t.Fatalf("UDP counts %+v", got)
	}
}

// TestUDPAndTCPTakeOver: sessions of one agent name on the two
// transports of one Core replace each other, whichever goroutine the
// takeover comes from.
func TestUDPAndTCPTakeOver(t *testing.T) {
	ts := startServer(t, Config{Insecure: true})
	tu := ts.withUDP(t)

	s1 := dial(t, ts.addr, nil, "x1", "")
	if ok, reason, err := s1.reply(); !ok {
		t.Fatalf("TCP: %q %v", reason, err)
	}
	a := tu.dial(t)
	a.send(wire.AppendHello(nil, hello("x1", 'x'))) // takes over from TCP
	if _, _, err := s1.fr.Next(); err == nil {
		t.Fatal("the TCP connection survived the UDP takeover")
	}
	a.send(udpBatch(1))
	s2 := dial(t, ts.addr, nil, "x1", "") // takes over from UDP
	if ok, reason, err := s2.reply(); !ok {
		t.Fatalf("TCP again: %q %v", reason, err)
	}
	a.send(udpBatch(2))
	if n, u := ts.core.Counters.Sessions.Load(), tu.srv.Counters.Unknown.Load(); n != 3 || u != 1 {
		t.Errorf("%d sessions, %d unknown datagrams; want 3 and 1", n, u)
	}
	if got := tu.srv.AgentCounts()["x1"]; got.Received != 1 {
		t.Errorf("UDP counts %+v, want 1 received", got)
	}
}

// TestUDPLossWarning: a session that loses datagrams is warned about
// while it runs, not only when it ends.
func TestUDPLossWarning(t *testing.T) {
	tu := startUDP(t, Config{})
	a := tu.dial(t)
	a.send(wire.AppendHello(nil, hello("w1", 1)))
	a.send(udpBatch(1))
	a.send(udpBatch(2 + windowSize)) // 2 leaves the window unseen
	testutil.EventuallyTrue(t, 5*time.Second, "the loss logged while the session runs", func() bool {
		return strings.Contains(tu.log.String(), `msg="datagrams lost" transport=udp agent=w1 lost=1 `)
	})
}

// FuzzUDPDatagram feeds arbitrary datagrams, from two sources, to a
// UDP server that already has a session putting a batch back together
// from pieces: nothing panics, the counts stay consistent, reassembly
// memory stays within its limits and is all given back when the
// sessions end, and the good session is not disturbed by the other
// source (its batch in pieces is written once).
func FuzzUDPDatagram(f *testing.F) {
	big := pieces(bigBatch(3, 3000, 'b'), 3, 1000) // numbers 3..6
	f.Add(wire.AppendHello(nil, hello("f2", 2)), true)
	f.Add(append(wire.AppendHello(nil, hello("f2", 2)), udpBatch(3)...), true)
	f.Add(udpBatch(2), false)
	f.Add(append(udpBatch(2), wire.AppendBye(nil)...), false)
	f.Add(wire.AppendIface(nil, 2, &wire.Interface{Name: "x", LinkType: 1, SnapLen: 9}), false)
	f.Add(wire.AppendStats(nil, &wire.Stats{Interfaces: []wire.IfaceStats{{Index: 7}}}), false)
	f.Add([]byte{wire.Magic, wire.Version, byte(wire.TypeBatch), 0, 0xff, 0xff, 0xff, 0xff}, true)
	for _, p := range big {
		f.Add(p, true)
		f.Add(p, false)
	}
	f.Add(wire.AppendPiece(nil, 3, 1, 3, bigBatch(3, 3000, 'b')), true)   // another count
	f.Add(wire.AppendPiece(nil, 5, 0, 2, bigBatch(5, 1500, 'c')), true)   // overlaps
	f.Add(wire.AppendPiece(nil, 40, 0, 9, bigBatch(40, 9000, 'd')), true) // another batch
	good := netip.MustParseAddrPort("127.0.0.1:1000")
	f.Fuzz(func(t *testing.T, d []byte, fromGood bool) {
		core := newCore(t, Config{Insecure: true, Store: store.Config{Fsync: store.FsyncNever}, UDPReassemblyBytes: 64 << 10}) // no syncs: thousands of inputs
		defer core.Close()
		conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		u := NewUDPServer(core)
		u.conn = conn
		now := time.Now()
		check := func() {
			t.Helper()
			if u.rsBytes > core.cfg.UDPReassemblyBytes || u.rsBytes != u.Counters.ReassemblyBytes.Load() {
				t.Fatalf("reassembly holds %d bytes (gauge %d), budget %d", u.rsBytes, u.Counters.ReassemblyBytes.Load(), core.cfg.UDPReassemblyBytes)
			}
			var held int64
			for r := u.rsHead; r != nil; r = r.next {
				held += int64(r.total)
				if r.got >= r.count || len(r.peer.rs) > udpMaxInProgress {
					t.Fatalf("batch %d: %d of %d pieces held; session holds %d batches", r.first, r.got, r.count, len(r.peer.rs))
				}
			}
			if held != u.rsBytes {
				t.Fatalf("batches in progress hold %d bytes, counted %d", held, u.rsBytes)
			}
		}
		u.datagram(wire.AppendHello(nil, hello("f1", 1)), good, now)
		u.datagram(udpBatch(1), good, now)
		u.datagram(big[0], good, now)
		src := netip.MustParseAddrPort("127.0.0.1:2000")
		if fromGood {
			src = good
		}
		u.datagram(d, src, now)
		check()
		for _, p := range big[1:] {
			u.datagram(p, good, now)
		}
		u.datagram(udpBatch(2), good, now)
		check()
		u.mu.Lock()
		for _, p := range u.peers {
			u.endPeer(p, false, "end of test")
		}
		u.mu.Unlock()
		if u.rsBytes != 0 || u.rsHead != nil || u.rsTail != nil {
			t.Fatalf("%d bytes still held for reassembly after every session ended", u.rsBytes)
		}
		for name, c := range u.AgentCounts() {
			if c.Reordered+c.Duplicates+c.Late > c.Received || c.Pieces > c.Received || 2*c.Reassembled > c.Pieces {
				t.Fatalf("%s: %+v", name, c)
			}
		}
		// Only a hello naming f1 (a takeover) may end its session.
		takeover := bytes.Contains(d, []byte("\x02f1"))
		if c := u.AgentCounts()["f1"]; !fromGood && !takeover && (c.Received != 2+len64(big) || c.Reassembled != 1) {
			t.Fatalf("another source disturbed the good session: %+v", c)
		}
	})
}

// TestUDPRefusesUnchecked: a datagram's batch must carry its checksum
// (UDP has no TLS); one without is counted malformed and not written,
// and the session goes on.
func TestUDPRefusesUnchecked(t *testing.T) {
	tu := startUDP(t, Config{})
	a := tu.dial(t)
	a.send(wire.AppendHello(nil, hello("u1", 1)))
	var e wire.BatchEncoder
	e.Unchecked = true
	e.Reset(nil)
	e.Append(1_700_000_000_000_000_000, 0, 60, make([]byte, 60))
	a.send(e.Finish(1))
	a.send(udpBatch(2))
	a.send(wire.AppendBye(nil))
	if m := tu.srv.Counters.Malformed.Load(); m != 1 {
		t.Errorf("malformed %d, want 1 (the unchecked batch)", m)
	}
	pkts, _ := readDir(t, filepath.Join(tu.core.Dir(), "u1"))
	if len(pkts) != 10 {
		t.Fatalf("%d packets written, want the 10 of the checked batch", len(pkts))
	}
}
