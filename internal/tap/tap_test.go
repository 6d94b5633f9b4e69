package tap

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

var testIfaces = []wire.Interface{
	{Name: "eth0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535},
	{Name: "tun0", LinkType: gen.LinkTypeRaw, SnapLen: 65535},
}

// event builds a batch of agent's packets seq from..to-1 of stream 1,
// alternating between the two test interfaces, size bytes each.
func event(t testing.TB, agent string, seq uint64, from, to uint64, size int) *collector.BatchEvent {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	buf := make([]byte, size)
	for i := from; i < to; i++ {
		ifx := uint32(i % 2)
		e.Append(int64(1_767_225_600_000_000_000+i*1000), ifx, uint32(size), gen.Frame(buf, testIfaces[ifx].LinkType, 1, i))
	}
	f := e.Finish(seq)
	b, err := wire.ParseBatch(0, f[wire.HeaderSize:], wire.BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	return &collector.BatchEvent{Agent: agent, Host: agent + ".example", Ifaces: testIfaces, Batch: &b}
}

// startTap serves a Tap on a loopback port until stop is called or the
// test ends.
func startTap(t testing.TB, cfg Config, lc ListenConfig) (tp *Tap, addr string, stop func()) {
	t.Helper()
	return startTapOn(t, cfg, lc, nil)
}

// startTapOn is startTap serving on ln, if not nil, which must wrap a
// loopback TCP listener that startTapOn sets.
func startTapOn(t testing.TB, cfg Config, lc ListenConfig, ln wrappedListener) (tp *Tap, addr string, stop func()) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener = tcp
	if ln != nil {
		ln.wrap(tcp)
		l = ln
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tp.Serve(ctx, l, lc) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Serve: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return tp, tcp.Addr().String(), stop
}

// wrappedListener is a net.Listener over one that startTapOn makes.
type wrappedListener interface {
	net.Listener
	wrap(net.Listener)
}

// readListener closes read at the first Read of a connection it
// accepted: the tap has begun to read its client.
type readListener struct {
	net.Listener
	read chan struct{}
	once sync.Once
}

func (l *readListener) wrap(ln net.Listener) { l.Listener = ln }

func (l *readListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &readConn{Conn: c, l: l}, nil
}

type readConn struct {
	net.Conn
	l *readListener
}

func (c *readConn) Read(b []byte) (int, error) {
	c.l.once.Do(func() { close(c.l.read) })
	return c.Conn.Read(b)
}

// dial connects and sends request (if not "").
func dial(t testing.TB, addr, request string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if request != "" {
		if _, err := io.WriteString(c, request); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// waitClients waits until n clients are being served.
func waitClients(t *testing.T, tp *Tap, n int64) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := tp.Counters.Connected.Load(); got != n {
			return fmt.Errorf("%d tap clients connected, want %d", got, n)
		}
		return nil
	})
}

type streamPacket struct {
	iface string
	seq   uint64
}

// readStream reads a tap stream to its end.
func readStream(t *testing.T, r io.Reader) []streamPacket {
	t.Helper()
	rd, err := pcapfile.NewReader(r, nil)
	if err != nil {
		t.Fatalf("reading the tap stream: %v", err)
	}
	var out []streamPacket
	var p pcapfile.Packet
	for {
		if err := rd.ReadInto(&p); err != nil {
			if err != io.EOF {
				t.Fatalf("tap stream after %d packets: %v", len(out), err)
			}
			return out
		}
		ifc := rd.Interfaces()[p.Interface]
		_, seq, ok, err := gen.Parse(p.Data, ifc.LinkType)
		if err != nil || !ok {
			t.Fatalf("tap stream packet %d: not generated (%v)", len(out), err)
		}
		out = append(out, streamPacket{ifc.Name, seq})
	}
}

// TestSelection: each client sees its agent's packets (its interface,
// passing its filter), in order, and nothing else; one that sends no
// request gets the listener's default.
func TestSelection(t *testing.T) {
	tp, addr, stop := startTap(t, Config{RequestWait: 50 * time.Millisecond}, ListenConfig{Default: Selection{Agent: "a2"}})
	clients := []struct {
		request string
		want    func(agent string, seq uint64) (string, bool)
	}{
		{"", func(a string, s uint64) (string, bool) { return a + ":" + testIfaces[s%2].Name, a == "a2" }},
		{"PCAPSYNC-TAP/1 agent=*\n", func(a string, s uint64) (string, bool) { return a + ":" + testIfaces[s%2].Name, true }},
		{"PCAPSYNC-TAP/1 agent=a1 iface=tun0\n", func(a string, s uint64) (string, bool) { return "a1:tun0", a == "a1" && s%2 == 1 }},
		// ip[4:2] is the IP ID, which gen.Frame sets to the sequence number.
		{"PCAPSYNC-TAP/1 agent=a1 filter=udp and ip[4:2] < 25\n", func(a string, s uint64) (string, bool) {
			return a + ":" + testIfaces[s%2].Name, a == "a1" && s < 25
		}},
	}
	conns := make([]net.Conn, len(clients))
	for i, c := range clients {
		conns[i] = dial(t, addr, c.request)
	}
	waitClients(t, tp, int64(len(clients)))
	var want [4][]streamPacket
	seq := uint64(0)
	for b := range 10 {
		agent := []string{"a1", "a2"}[b%2]
		ev := event(t, agent, uint64(b+1), seq, seq+10, 200)
		for i, c := range clients {
			for s := seq; s < seq+10; s++ {
				if name, ok := c.want(agent, s); ok {
					want[i] = append(want[i], streamPacket{name, s})
				}
			}
		}
		tp.Batch(ev)
		seq += 10
	}
	// Ending the tap drains every queue, then ends the streams.
	stop()
	got := make([][]streamPacket, len(clients))
	for i, c := range conns {
		got[i] = readStream(t, c)
	}
	for i := range clients {
		if len(got[i]) != len(want[i]) {
			t.Errorf("client %d (%q): %d packets, want %d", i, clients[i].request, len(got[i]), len(want[i]))
			continue
		}
		for j := range got[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("client %d (%q): packet %d is %v, want %v", i, clients[i].request, j, got[i][j], want[i][j])
				break
			}
		}
	}
	if n := tp.Counters.DroppedSlow.Load(); n != 0 {
		t.Errorf("%d clients dropped as slow", n)
	}
}

// readLine reads the one line a refused client is told, and then EOF.
func readLine(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("reading the reply: %v", err)
	}
	return string(b)
}

// TestRefused: a bad request, a missing or wrong token, a bad filter,
// one naming hosts (capture.CheckRemoteFilter) and a client over
// MaxClients get one error line and are closed.
func TestRefused(t *testing.T) {
	tp, addr, _ := startTap(t, Config{Token: "0123456789abcdef", MaxClients: 1, RequestWait: 50 * time.Millisecond}, ListenConfig{})
	for _, tt := range []struct{ request, want string }{
		{"", "token required"},
		{"PCAPSYNC-TAP/1 agent=a1\n", "token required"},
		{"PCAPSYNC-TAP/1 agent=a1 token=0123456789abcdeX\n", "wrong token"},
		{"PCAPSYNC-TAP/1 agent=a1 tok=0123456789abcdef\n", "unknown key"},
		{"PCAPSYNC-TAP/1 token=0123456789abcdef filter=udp port 99999\n", "filter"},
		{"PCAPSYNC-TAP/1 token=0123456789abcdef filter=" + strings.Repeat("(", MaxRequest) + "\n", "longer than"},
		{"PCAPSYNC-TAP/1 token=0123456789abcdef filter=" + strings.Repeat("udp or ", 48) + "tcp\n", "filter beyond the limits: 49 terms"},
		{"PCAPSYNC-TAP/1 token=0123456789abcdef filter=udp and host db1.example.invalid\n", `"db1.example.invalid" would be looked up as a host`},
		{"PCAPSYNC-TAP/1 token=0123456789abcdef filter=net lab or ether host gw\n", `"lab", "gw" would be looked up`},
		{"hello", "does not start"},
	} {
		got := readLine(t, dial(t, addr, tt.request))
		if !strings.HasPrefix(got, Proto+" ERROR ") || !strings.Contains(got, tt.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("request %.60q: reply %q, want one error line about %q", tt.request, got, tt.want)
		}
	}
	ok := dial(t, addr, "PCAPSYNC-TAP/1 token=0123456789abcdef\n")
	waitClients(t, tp, 1)
	got := readLine(t, dial(t, addr, "PCAPSYNC-TAP/1 token=0123456789abcdef\n"))
	if !strings.Contains(got, "too many tap clients") {
		t.Errorf("client over MaxClients: reply %q", got)
	}
	if n := tp.Counters.Rejected.Load(); n != 11 {
		t.Errorf("Rejected = %d, want 11", n)
	}
	ok.Close()
}

// TestSlowClientDropped: a client that never reads fills its queue and
// is dropped, counted; Batch never waits for it, and other clients
// carry on.
func TestSlowClientDropped(t *testing.T) {
	// A write timeout far beyond the test: the stalled client must be
	// dropped for its full queue, and a Batch that waited for it would
	// take that long.
	tp, addr, stop := startTap(t, Config{QueueSize: 256 << 10, WriteTimeout: time.Minute}, ListenConfig{})
	// 9 MB in all, at about 15 MB/s: the reader keeps up, the stalled
	// client's queue and socket buffers (up to 4 MB as the kernel tunes
	// them) overflow.
	// A tiny receive buffer, so that the kernel's buffers fill quickly too.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	stalled, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	io.WriteString(stalled, "PCAPSYNC-TAP/1 agent=a1\n")
	reader := dial(t, addr, "PCAPSYNC-TAP/1 agent=a1\n")
	var got []streamPacket
	read := make(chan struct{})
	go func() { defer close(read); got = readStreamQuiet(reader) }()
	waitClients(t, tp, 2)
	var slowest time.Duration
	const batches, per = 300, 30
	for b := range uint64(batches) {
		ev := event(t, "a1", b+1, b*per, (b+1)*per, 1000)
		start := time.Now()
		tp.Batch(ev)
		slowest = max(slowest, time.Since(start))
		time.Sleep(2 * time.Millisecond) // the batches' pace: about 15 MB/s, which the reader keeps up with
	}
	// Not 0: a busy machine may deschedule the test for a moment.
	if slowest > time.Second {
		t.Errorf("slowest Batch took %v: it waited for a client", slowest)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		if d, c := tp.Counters.DroppedSlow.Load(), tp.Counters.Connected.Load(); d != 1 || c != 1 {
			return fmt.Errorf("dropped %d, connected %d; want the stalled client dropped, the reader kept", d, c)
		}
		return nil
	})
	// The stalled client's connection is closed: reading it ends.
	stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, stalled); err != nil && !isTimeout(err) {
		t.Logf("stalled client: %v", err) // a reset is fine too
	} else if err != nil {
		t.Errorf("the stalled client's connection stayed open")
	}
	stop()
	<-read
	if len(got) != batches*per {
		t.Errorf("the reading client got %d packets, want %d", len(got), batches*per)
	}
	for i, p := range got {
		if p.seq != uint64(i) {
			t.Fatalf("the reading client's packet %d is seq %d", i, p.seq)
		}
	}
}

// readStreamQuiet is readStream for another goroutine: it stops at the
// first error.
func readStreamQuiet(r io.Reader) []streamPacket {
	rd, err := pcapfile.NewReader(r, nil)
	if err != nil {
		return nil
	}
	var out []streamPacket
	var p pcapfile.Packet
	for rd.ReadInto(&p) == nil {
		ifc := rd.Interfaces()[p.Interface]
		_, seq, _, _ := gen.Parse(p.Data, ifc.LinkType)
		out = append(out, streamPacket{ifc.Name, seq})
	}
	return out
}

// TestBatchWithoutClientsAllocs: the feed costs nothing without clients.
func TestBatchWithoutClientsAllocs(t *testing.T) {
	tp, addr, _ := startTap(t, Config{RequestWait: 20 * time.Millisecond}, ListenConfig{})
	ev := event(t, "a1", 1, 0, 10, 100)
	if n := testing.AllocsPerRun(100, func() { tp.Batch(ev) }); n != 0 {
		t.Errorf("Batch without clients: %v allocations, want 0", n)
	}
	// And again once a client came and went.
	c := dial(t, addr, "")
	waitClients(t, tp, 1)
	c.Close()
	testutil.EventuallyTrue(t, 5*time.Second, "the tap to drop the client that left", func() bool {
		tp.Batch(ev) // the write fails: the client is gone
		return tp.Counters.Connected.Load() == 0
	})
	if n := testing.AllocsPerRun(100, func() { tp.Batch(ev) }); n != 0 {
		t.Errorf("Batch after the last client left: %v allocations, want 0", n)
	}
}

// TestTLS: a TLS tap verifies client certificates and refuses plain
// TCP clients with a plain error line; with Plain (a loopback tap) it
// serves both.
func TestTLS(t *testing.T) {
	p := pkitest.New(t)
	srv := p.Server(t, true)
	cert, key := p.Issue(t, p.CA, "viewer", pki.Leaf{CommonName: "viewer", Client: true})
	for _, plain := range []bool{false, true} {
		tp, addr, stop := startTap(t, Config{RequestWait: 50 * time.Millisecond}, ListenConfig{TLS: srv, Plain: plain})
		// Plain TCP.
		pc := dial(t, addr, "PCAPSYNC-TAP/1 agent=a1\n")
		if !plain {
			if got := readLine(t, pc); !strings.Contains(got, "requires TLS") {
				t.Errorf("plain client at a TLS tap: reply %q", got)
			}
		}
		// TLS without a client certificate: the handshake fails.
		nc, err := tls.Dial("tcp", addr, p.RawClient(t, "", ""))
		if err == nil {
			io.WriteString(nc, "PCAPSYNC-TAP/1 agent=a1\n")
			if _, err = nc.Read(make([]byte, 1)); err == nil {
				t.Errorf("TLS client without a certificate was served")
			}
			nc.Close()
		}
		// TLS with one.
		tc, err := tls.Dial("tcp", addr, p.RawClient(t, cert, key))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(tc, "PCAPSYNC-TAP/1 agent=a1\n")
		want := int64(1)
		if plain {
			want = 2
		}
		waitClients(t, tp, want)
		tp.Batch(event(t, "a1", 1, 0, 10, 100))
		testutil.Eventually(t, 5*time.Second, func() error {
			if got := tp.Counters.Packets.Load(); got != uint64(10*want) {
				return fmt.Errorf("%d packets sent, want %d", got, 10*want)
			}
			return nil
		})
		stop()
		if got := readStreamQuiet(tc); len(got) != 10 {
			t.Errorf("TLS client (plain %v) got %d packets, want 10", plain, len(got))
		}
		if plain {
			if got := readStreamQuiet(pc); len(got) != 10 {
				t.Errorf("plain client at a loopback tap got %d packets, want 10", len(got))
			}
		}
		tc.Close()
	}
}

// TestShutdownDuringHandshake: a client stuck in its TLS handshake does
// not hold up the tap's shutdown for the handshake timeout.
func TestShutdownDuringHandshake(t *testing.T) {
	p := pkitest.New(t)
	ln := &readListener{read: make(chan struct{})}
	tp, addr, stop := startTapOn(t, Config{}, ListenConfig{TLS: p.Server(t, false)}, ln)
	dial(t, addr, "\x16\x03\x01") // the start of a ClientHello, never finished
	<-ln.read                     // the tap is in the handshake
	start := time.Now()
	stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("shutdown took %v with a handshake pending", d)
	}
	if n := tp.Counters.Rejected.Load(); n != 1 {
		t.Errorf("Rejected = %d, want 1", n)
	}
}

// TestFilterOriginalLength: a client's filter sees a packet's original
// length as BPF's len, as tcpdump -r does: of packets captured to 200
// bytes, those 1500 long on the wire are "greater 1000".
func TestFilterOriginalLength(t *testing.T) {
	tp, addr, stop := startTap(t, Config{}, ListenConfig{})
	c := dial(t, addr, "PCAPSYNC-TAP/1 agent=a1 filter=greater 1000\n")
	waitClients(t, tp, 1)
	var e wire.BatchEncoder
	e.Reset(nil)
	buf := make([]byte, 200)
	var want []streamPacket
	for i := range uint64(20) {
		orig := uint32(200)
		if i%4 == 0 {
			orig = 1500
			want = append(want, streamPacket{"a1:eth0", i})
		}
		e.Append(int64(1_767_225_600_000_000_000+i*1000), 0, orig, gen.Frame(buf, gen.LinkTypeEthernet, 1, i))
	}
	b, err := wire.ParseBatch(0, e.Finish(1)[wire.HeaderSize:], wire.BatchLimits{})
	if err != nil {
		t.Fatal(err)
	}
	tp.Batch(&collector.BatchEvent{Agent: "a1", Host: "a1.example", Ifaces: testIfaces, Batch: &b})
	stop()
	if got := readStream(t, c); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestGoneClientDropped: a client whose filter passes nothing is
// dropped soon after it goes away, whether its side closed (a process
// that exited: FIN) or reset, though nothing is written to it.
func TestGoneClientDropped(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close func(*net.TCPConn)
	}{
		{"closed", func(c *net.TCPConn) { c.Close() }},
		{"reset", func(c *net.TCPConn) { c.SetLinger(0); c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testutil.Buffer
			tp, addr, _ := startTap(t, Config{ProbeInterval: 100 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, ListenConfig{})
			// gen.Frame's packets are UDP: this filter passes none.
			c := dial(t, addr, "PCAPSYNC-TAP/1 agent=a1 filter=tcp port 443\n")
			waitClients(t, tp, 1)
			tp.Batch(event(t, "a1", 1, 0, 10, 100))
			tc.close(c.(*net.TCPConn))
			seq := uint64(10)
			testutil.Eventually(t, 5*time.Second, func() error {
				tp.Batch(event(t, "a1", seq/10+1, seq, seq+10, 100)) // the agent goes on; none passes
				seq += 10
				if n := tp.Counters.Connected.Load(); n != 0 {
					return fmt.Errorf("%d clients connected after the only one went away", n)
				}
				if !strings.Contains(logs.String(), `msg="tap client disconnected"`) {
					return errors.New("no log line of the client's end yet")
				}
				return nil
			})
			if n := tp.Counters.Packets.Load(); n != 0 {
				t.Errorf("%d packets sent through a filter that passes none", n)
			}
		})
	}
}

// TestHalfClosedClientServed: a client that closes its side after its
// request line and goes on reading (`printf REQUEST | ncat HOST PORT`)
// stays served; the probes it is sent while idle leave a stream that
// pcapfile, tcpdump and tshark read.
func TestHalfClosedClientServed(t *testing.T) {
	tp, addr, stop := startTap(t, Config{ProbeInterval: 20 * time.Millisecond}, ListenConfig{})
	// One interface: tcpdump reads one link type only.
	c := dial(t, addr, "PCAPSYNC-TAP/1 agent=a1 iface=eth0 filter=udp\n")
	waitClients(t, tp, 1)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	read := make(chan error, 1)
	go func() { _, err := io.Copy(&got, c); read <- err }()
	// The probes: a section header, then empty name resolution blocks.
	testutil.EventuallyTrue(t, 5*time.Second, "the first probe", func() bool { return tp.Counters.Bytes.Load() > 0 })
	shb := tp.Counters.Bytes.Load()
	testutil.EventuallyTrue(t, 5*time.Second, "two more probes", func() bool { return tp.Counters.Bytes.Load() >= shb+2*16 })
	if n := tp.Counters.Connected.Load(); n != 1 {
		t.Fatalf("%d clients connected: the half-closed one was dropped", n)
	}
	tp.Batch(event(t, "a1", 1, 0, 10, 100))
	testutil.EventuallyTrue(t, 5*time.Second, "the 5 packets of eth0 sent", func() bool { return tp.Counters.Packets.Load() == 5 })
	stop()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	if pk := readStream(t, bytes.NewReader(got.Bytes())); len(pk) != 5 {
		t.Fatalf("%d packets in the stream, want 5", len(pk))
	}
	file := filepath.Join(t.TempDir(), "tap.pcapng")
	if err := os.WriteFile(file, got.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tool := range [][]string{{"tcpdump", "-nr", file}, {"tshark", "-n", "-r", file}} {
		if _, err := exec.LookPath(tool[0]); err != nil {
			t.Logf("%s not installed: not checked with it", tool[0])
			continue
		}
		out, err := exec.Command(tool[0], tool[1:]...).Output()
		if err != nil {
			t.Errorf("%s: %v", strings.Join(tool, " "), err)
		}
		if n := strings.Count(string(out), "\n"); n != 5 {
			t.Errorf("%s printed %d lines, want 5:\n%s", tool[0], n, out)
		}
	}
}
