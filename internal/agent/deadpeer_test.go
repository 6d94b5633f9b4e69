package agent

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// freezer is a TCP proxy on loopback that, on its first connection,
// stops forwarding in both directions once freezeAfter bytes went from
// client to server: no FIN, no RST, nothing, like a silent partition or
// a stopped peer. Later connections are forwarded normally.
type freezer struct {
	ln          net.Listener
	target      string
	freezeAfter int64

	mu       sync.Mutex
	frozenAt time.Time   // when the first connection froze
	lastDown time.Time   // when the first connection last forwarded server -> client
	accepts  []time.Time // when each connection was accepted
	conns    []net.Conn
	stop     chan struct{}
}

func newFreezer(t *testing.T, target string, freezeAfter int64) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, freezeAfter: freezeAfter, stop: make(chan struct{})}
	go f.accept()
	t.Cleanup(func() {
		ln.Close()
		close(f.stop)
		f.mu.Lock()
		for _, c := range f.conns {
			c.Close()
		}
		f.mu.Unlock()
	})
	return f
}

func (f *freezer) accept() {
	for n := 0; ; n++ {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.accepts = append(f.accepts, time.Now())
		f.conns = append(f.conns, c, s)
		f.mu.Unlock()
		var frozen atomic.Bool
		limit := int64(-1)
		if n == 0 {
			limit = f.freezeAfter
		}
		go f.pipe(s, c, limit, &frozen, nil) // client -> server, may freeze
		var down *time.Time
		if n == 0 {
			down = &f.lastDown
		}
		go f.pipe(c, s, -1, &frozen, down) // server -> client
	}
}

// pipe copies src to dst until frozen; then it holds both ends open and
// forwards nothing until the test ends. If last is set, it records
// there (under f.mu) when it last forwarded.
func (f *freezer) pipe(dst, src net.Conn, limit int64, frozen *atomic.Bool, last *time.Time) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		if frozen.Load() {
			<-f.stop
			return
		}
		k, err := src.Read(buf)
		if frozen.Load() {
			<-f.stop
			return
		}
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
			if last != nil {
				f.mu.Lock()
				*last = time.Now()
				f.mu.Unlock()
			}
			n += int64(k)
			if limit >= 0 && n >= limit && !frozen.Swap(true) {
				f.mu.Lock()
				f.frozenAt = time.Now()
				f.mu.Unlock()
			}
		}
		if err != nil {
			if err == io.EOF {
				if cw, ok := dst.(*net.TCPConn); ok {
					cw.CloseWrite()
				}
			}
			return
		}
	}
}

// TestDeadCollectorDetected: the path to the collector goes silent in
// the middle of a replay. The agent must notice within its peer timeout
// (no ack, no heartbeat), drop the connection, reconnect and resend from
// the first unacknowledged batch; the collector ends up with every
// packet exactly once.
func TestDeadCollectorDetected(t *testing.T) {
	const (
		packets     = 20000
		heartbeat   = 100 * time.Millisecond
		peerTimeout = 500 * time.Millisecond
	)
	coll := startCollector(t, collector.Config{Insecure: true, Heartbeat: heartbeat, PeerTimeout: time.Second})
	px := newFreezer(t, coll.addr, 256<<10)
	start := time.Now()
	s, err, log := replay(t, Config{Collectors: []string{px.ln.Addr().String()}, Name: "frozen", Insecure: true, BatchBytes: 16 << 10,
		Heartbeat: heartbeat, PeerTimeout: peerTimeout}, packets)
	if err != nil || s.Acked != packets || s.Reconnects == 0 {
		t.Fatalf("summary %+v, err %v: want all %d acknowledged after a reconnect", s, err, packets)
	}
	if !strings.Contains(log, "collector silent") {
		t.Errorf("the agent's log does not say the collector went silent:\n%s", log)
	}
	px.mu.Lock()
	frozenAt, lastDown, accepts := px.frozenAt, px.lastDown, px.accepts
	px.mu.Unlock()
	if frozenAt.IsZero() || len(accepts) < 2 {
		t.Fatalf("the proxy froze at %v and accepted %d connections", frozenAt, len(accepts))
	}
	// Detection takes the peer timeout after the last byte the agent
	// received (before the freeze, by as much as the agent's last ack
	// came before it), the reconnect a backoff of at most 125ms more.
	// The upper bound leaves room for a loaded machine: the point is
	// seconds, where TCP alone takes up to 15 minutes.
	if d := accepts[1].Sub(lastDown); d < peerTimeout || d > peerTimeout+5*time.Second {
		t.Errorf("reconnected %v after the last byte to the agent (%v after the freeze), want a little over %v",
			d, accepts[1].Sub(frozenAt), peerTimeout)
	}
	if got := coll.core.Counters.Packets.Load(); got != packets {
		t.Errorf("collector wrote %d packets, want %d", got, packets)
	}
	t.Logf("replay took %v; reconnected %v after the freeze; duplicates dropped %d",
		time.Since(start).Round(time.Millisecond), accepts[1].Sub(frozenAt).Round(time.Millisecond), coll.core.Counters.Duplicates.Load())
}

// TestIdleAgentPings: an agent with nothing to send pings the collector
// every heartbeat, and stays connected as long as the collector's
// heartbeats (re-sent acks) arrive, however long it waits for an ack.
func TestIdleAgentPings(t *testing.T) {
	const heartbeat = 50 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	result := make(chan error, 1)
	go func() {
		result <- func() error {
			c, err := ln.Accept()
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fr := wire.NewFrameReader(c, wire.Limits{})
			if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeHello {
				return fmt.Errorf("hello: %s %v", h.Type, err)
			}
			c.Write(wire.AppendWelcome(nil, wire.Welcome{MaxFrame: 16 << 20}))
			// Heartbeats only (ack 0) for a second, longer than 6 of the
			// agent's peer timeouts, then the ack.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(heartbeat):
					}
					if _, err := c.Write(wire.AppendAck(nil, 0)); err != nil {
						return
					}
				}
			}()
			pings, last := 0, uint64(0)
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				h, p, err := fr.Next()
				if err != nil {
					return err
				}
				switch h.Type {
				case wire.TypePing:
					pings++
				case wire.TypeBatch:
					b, _ := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
					last = b.Seq
				}
			}
			if pings < 8 {
				return fmt.Errorf("%d pings in 1s, want about 20", pings)
			}
			c.Write(wire.AppendAck(nil, last))
			for { // until the agent's goodbye
				if _, _, err := fr.Next(); err != nil {
					if err == io.EOF {
						return nil
					}
					return err
				}
			}
		}()
	}()
	s, err, log := replay(t, Config{Collectors: []string{ln.Addr().String()}, Name: "idle", Insecure: true,
		Heartbeat: heartbeat, PeerTimeout: 3 * heartbeat}, 10)
	if err != nil || s.Acked != 10 || s.Reconnects != 0 {
		t.Fatalf("summary %+v, err %v; log:\n%s", s, err, log)
	}
	if err := <-result; err != nil {
		t.Fatal(err)
	}
}
