package collector

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// testServer is a Core and its Server on a loopback port.
type testServer struct {
	core *Core
	srv  *Server
	addr string
	log  *testutil.Buffer
}

// startServer starts a Server for cfg (Dir defaults to a temporary
// directory) and stops it in t.Cleanup.
func startServer(t *testing.T, cfg Config) *testServer {
	t.Helper()
	return startServerOn(t, cfg, "127.0.0.1:0")
}

// startServerOn is startServer on addr (HOST:PORT).
func startServerOn(t *testing.T, cfg Config, addr string) *testServer {
	t.Helper()
	if cfg.Store.Dir == "" {
		cfg.Store.Dir = filepath.Join(t.TempDir(), "out")
	}
	lb := &testutil.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})) // refusals after the first of a second are at debug
	core, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	srv := NewServer(core)
	go func() { served <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		core.Close()
		if t.Failed() {
			t.Logf("collector log:\n%s", lb.String())
		}
	})
	return &testServer{core: core, srv: srv, addr: ln.Addr().String(), log: lb}
}

// waitConns waits until the server holds n connections.
func (ts *testServer) waitConns(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		if got := len(ts.srv.conns); got != n {
			return fmt.Errorf("the server holds %d connections, want %d", got, n)
		}
		return nil
	})
}

// waitRejected waits until the server counted n rejections and logged
// reason.
func (ts *testServer) waitRejected(t *testing.T, n uint64, reason string) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		if got := ts.core.Counters.Rejected.Load(); got < n || !strings.Contains(ts.log.String(), reason) {
			return fmt.Errorf("rejected %d (want %d), log has %q: %v", got, n, reason, strings.Contains(ts.log.String(), reason))
		}
		return nil
	})
}

// expectNothingWritten checks that the output directory holds no agent
// directory and no file.
func (ts *testServer) expectNothingWritten(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir(ts.core.Dir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() != store.ReserveFile && e.Name() != store.OwnerFile { // the collector's own, made at start
			t.Errorf("a rejected agent left %q in the output directory", e.Name())
		}
	}
}

// agentConn is a test agent's connection.
type agentConn struct {
	conn net.Conn
	fr   *wire.FrameReader
}

// dial connects (over TLS if cfg is set) and sends a hello for name.
func dial(t *testing.T, addr string, cfg *tls.Config, name, token string) *agentConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if cfg != nil {
		conn = tls.Client(conn, cfg)
	}
	h := hello(name, name[0])
	h.Token = token
	if _, err := conn.Write(wire.AppendHello(nil, h)); err != nil {
		// TLS 1.3: a refused certificate shows on the first read, not here.
		t.Logf("writing hello: %v", err)
	}
	return &agentConn{conn: conn, fr: wire.NewFrameReader(conn, wire.Limits{})}
}

// reply reads the handshake's answer: the Welcome, or the reason of a
// Reject, or the error.
func (s *agentConn) reply() (welcome bool, reason string, err error) {
	h, p, err := s.fr.Next()
	if err != nil {
		return false, "", err
	}
	switch h.Type {
	case wire.TypeWelcome:
		return true, "", nil
	case wire.TypeReject:
		reason, err = wire.ParseReject(p)
		return false, reason, err
	}
	return false, "", errors.New("unexpected " + h.Type.String())
}

// deliver sends n batches of one packet, waits for their ack and says
// goodbye.
func (s *agentConn) deliver(t *testing.T, n int) {
	t.Helper()
	var out []byte
	var e wire.BatchEncoder
	for i := range n {
		e.Reset(nil)
		e.Append(int64(i), 0, 10, []byte("0123456789"))
		out = append(out, e.Finish(uint64(i+1))...)
	}
	if _, err := s.conn.Write(out); err != nil {
		t.Fatal(err)
	}
	for acked := uint64(0); acked < uint64(n); {
		h, p, err := s.fr.Next()
		if err != nil || h.Type != wire.TypeAck {
			t.Fatalf("waiting for acks: %s, %v", h.Type, err)
		}
		acked, _ = wire.ParseAck(p)
	}
	type closeWriter interface{ CloseWrite() error }
	s.conn.(closeWriter).CloseWrite()
	if _, _, err := s.fr.Next(); err != io.EOF {
		t.Fatalf("after goodbye: %v, want EOF", err)
	}
}

// waitSessionsEnded waits until no agent has a session: the server
// closes a connection before it ends the session (which closes the file
// after a goodbye).
func waitSessionsEnded(t *testing.T, c *Core) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		active := 0
		for _, ag := range c.agents {
			if ag.active != nil {
				active++
			}
		}
		if active > 0 {
			return fmt.Errorf("%d sessions active after their connections closed", active)
		}
		return nil
	})
}

// TestMutualTLS runs real TLS over loopback against a Server that
// requires client certificates: every bad client is refused, logged with
// the reason and counted before anything exists in the output directory;
// then the good one delivers.
func TestMutualTLS(t *testing.T) {
	p := pkitest.New(t)
	ts := startServer(t, Config{TLS: p.Server(t, true)})
	old := time.Now().Add(-48 * time.Hour)
	client := func(ca *pki.Authority, l pki.Leaf) *tls.Config {
		l.Client = true
		c, k := p.Issue(t, ca, l.CommonName, l)
		return p.RawClient(t, c, k)
	}
	tests := []struct {
		name      string
		client    *tls.Config
		agent     string
		logReason string // in the collector's log
		reason    string // in the Reject the agent reads; "" for a TLS alert
	}{
		{"no client certificate", p.RawClient(t, "", ""), "web1", "client didn't provide a certificate", ""},
		{"certificate from another CA", client(p.Foreign, pki.Leaf{CommonName: "web1"}), "web1", "certificate signed by unknown authority", ""},
		{"expired certificate", client(p.CA, pki.Leaf{CommonName: "web1-old", DNSNames: []string{"web1"}, NotBefore: old, NotAfter: old.Add(time.Hour)}), "web1", "certificate has expired", ""},
		{"name is not the certificate's", client(p.CA, pki.Leaf{CommonName: "web2", DNSNames: []string{"web2.example"}}), "web1",
			`agent name \"web1\", certificate CN \"web2\"`, `agent name "web1", certificate CN "web2"`},
		{"plain TCP to a TLS collector", nil, "web1", "requires TLS", "requires TLS"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := dial(t, ts.addr, tt.client, tt.agent, "")
			welcome, reason, err := s.reply()
			if welcome {
				t.Fatal("welcomed")
			}
			if tt.reason != "" && !strings.Contains(reason, tt.reason) {
				t.Fatalf("reject reason %q (err %v), want %q", reason, err, tt.reason)
			}
			if tt.reason == "" && err == nil {
				t.Fatalf("no TLS error, reason %q", reason)
			}
			t.Logf("agent sees: reason %q, err %v", reason, err)
			ts.waitRejected(t, uint64(i+1), tt.logReason)
			ts.expectNothingWritten(t)
		})
	}
	if ts.core.Counters.Sessions.Load() != 0 {
		t.Fatal("a rejected agent got a session")
	}

	// The good agent: its name is its certificate's DNS name.
	s := dial(t, ts.addr, client(p.CA, pki.Leaf{CommonName: "host-web1", DNSNames: []string{"web1"}}), "web1", "")
	if welcome, reason, err := s.reply(); !welcome {
		t.Fatalf("good agent: reason %q, err %v", reason, err)
	}
	s.deliver(t, 3)
	waitSessionsEnded(t, ts.core)
	if pkts, _ := readDir(t, filepath.Join(ts.core.Dir(), "web1")); len(pkts) != 3 {
		t.Fatalf("%d packets written, want 3", len(pkts))
	}
	if !strings.Contains(ts.log.String(), `tls="TLS 1.3"`) || !strings.Contains(ts.log.String(), "cert_cn=host-web1") {
		t.Error("the session's log line names neither the TLS version nor the certificate")
	}
}

// TestToken checks the shared-token mode over TLS without client
// certificates (the reasons the agent reads, the token kept out of the
// log), and that a token needs TLS unless Insecure is set.
func TestToken(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	p := pkitest.New(t)
	ts := startServer(t, Config{TLS: p.Server(t, false), Token: token})
	cli := p.RawClient(t, "", "")
	bad := []struct{ name, token, reason string }{
		{"missing", "", "token required"},
		{"wrong, same length", strings.ToUpper(token), "wrong token"},
		{"prefix", token[:16], "wrong token"},
		{"longer", token + "0", "wrong token"},
	}
	for i, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			welcome, reason, err := dial(t, ts.addr, cli, "tok", tt.token).reply()
			if welcome || !strings.Contains(reason, tt.reason) {
				t.Fatalf("welcome %v, reason %q, err %v; want a reject saying %q", welcome, reason, err, tt.reason)
			}
			ts.waitRejected(t, uint64(i+1), tt.reason)
			ts.expectNothingWritten(t)
		})
	}
	if strings.Contains(ts.log.String(), token) {
		t.Fatal("the token appears in the log")
	}
	s := dial(t, ts.addr, cli, "tok", token)
	if welcome, reason, err := s.reply(); !welcome {
		t.Fatalf("right token: reason %q, err %v", reason, err)
	}
	s.deliver(t, 2)

	// Plain TCP: refused unless Insecure; with it, the token still counts.
	cfg := Config{Store: store.Config{Dir: t.TempDir()}, Token: token}
	if _, err := NewCore(cfg); err == nil || !strings.Contains(err.Error(), "clear text") {
		t.Fatalf("token over plain TCP without Insecure: %v", err)
	}
	// With Insecure, the token still counts: TestFrontDoor.

	for _, bad := range []string{"short", strings.Repeat("x", wire.MaxTokenLen+1)} {
		if _, err := NewCore(Config{Store: store.Config{Dir: t.TempDir()}, Token: bad, Insecure: true}); err == nil {
			t.Errorf("token of %d bytes accepted", len(bad))
		}
	}
}

// TestServeNeedsTLSOrInsecure: the zero Config does not serve plain TCP.
func TestServeNeedsTLSOrInsecure(t *testing.T) {
	core := newCore(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := NewServer(core).Serve(context.Background(), ln); !errors.Is(err, ErrInsecure) {
		t.Fatalf("Serve = %v, want ErrInsecure", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener is still open")
	}
}

// TestTLSAgentToPlainCollector: the collector logs a hint.
func TestTLSAgentToPlainCollector(t *testing.T) {
	p := pkitest.New(t)
	ts := startServer(t, Config{Insecure: true})
	if welcome, _, err := dial(t, ts.addr, p.RawClient(t, "", ""), "web1", "").reply(); welcome || err == nil {
		t.Fatalf("welcome %v, err %v", welcome, err)
	}
	ts.waitRejected(t, 1, "the agent speaks TLS")
	ts.expectNothingWritten(t)
}
