package agent

import (
	"context"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// brokenCollector welcomes every agent and drops the connection at its
// first batch, like a collector whose disk is full: the handshake works,
// nothing is ever acknowledged. With ackFrom > 0, connections from that
// one on acknowledge the first batch before they drop.
type brokenCollector struct {
	ln      net.Listener
	ackFrom int

	mu      sync.Mutex
	accepts []time.Time
	changed chan struct{} // closed and replaced at every accept
}

func newBrokenCollector(t *testing.T, ackFrom int) *brokenCollector {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	bc := &brokenCollector{ln: ln, ackFrom: ackFrom, changed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			bc.mu.Lock()
			bc.accepts = append(bc.accepts, time.Now())
			n := len(bc.accepts)
			close(bc.changed)
			bc.changed = make(chan struct{})
			bc.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				bc.serve(c, bc.ackFrom > 0 && n >= bc.ackFrom)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	return bc
}

func (bc *brokenCollector) serve(c net.Conn, ack bool) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fr := wire.NewFrameReader(c, wire.Limits{})
	if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeHello {
		return
	}
	c.Write(wire.AppendWelcome(nil, wire.Welcome{MaxFrame: 16 << 20}))
	for {
		h, p, err := fr.Next()
		if err != nil {
			return
		}
		if h.Type != wire.TypeBatch {
			continue
		}
		if ack {
			b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
			if err != nil {
				return
			}
			// Ack, then end the stream: the agent reads the ack before
			// the end, and ends the connection itself.
			c.Write(wire.AppendAck(nil, b.Seq))
			c.(*net.TCPConn).CloseWrite()
			for {
				if _, _, err := fr.Next(); err != nil {
					return
				}
			}
		}
		c.(*net.TCPConn).SetLinger(0)
		return
	}
}

// waitAccepts waits up to limit for n connections and returns their times.
func (bc *brokenCollector) waitAccepts(t *testing.T, n int, limit time.Duration) []time.Time {
	t.Helper()
	deadline := time.After(limit)
	for {
		bc.mu.Lock()
		got, ch := append([]time.Time(nil), bc.accepts...), bc.changed
		bc.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%d connections within %s, want %d", len(got), limit, n)
		}
	}
}

// TestBackoffGrowsWithoutProgress: a collector that welcomes the agent
// and drops it at its first batch, every time, must see the agent back
// ever more slowly (doubling backoff), not every BackoffMin; once a
// connection gets a batch acknowledged, the backoff starts over. Over
// real sockets, with lower bounds only: it covers the TCP dial and the
// socket options; TestBackoffSchedule checks the exact schedule.
func TestBackoffGrowsWithoutProgress(t *testing.T) {
	const minB = 10 * time.Millisecond
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 2000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, bc *brokenCollector) {
		t.Helper()
		a, err := New(Config{Collectors: []string{bc.ln.Addr().String()}, Name: "b", ReadFile: path, BatchBytes: 16 << 10, Insecure: true,
			BackoffMin: minB, BackoffMax: 64 * minB, ShutdownTimeout: 50 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := runAsync(ctx, a)
		t.Cleanup(func() { cancel(); <-done })
	}

	t.Run("no progress", func(t *testing.T) {
		bc := newBrokenCollector(t, 0)
		run(t, bc)
		// Gaps of at least 0.75 x 10, 20, 40, 80, 160 ms: 232 ms for the
		// first six connections. Resetting at every welcome makes each
		// gap about 10 ms.
		at := bc.waitAccepts(t, 6, 10*time.Second)
		if span := at[5].Sub(at[0]); span < 232*time.Millisecond {
			t.Errorf("6 connections within %s: the backoff did not grow (gaps %v)", span, gaps(at[:6]))
		}
		if last := at[5].Sub(at[4]); last < 12*minB {
			t.Errorf("gap before the 6th connection %s, want at least %s (gaps %v)", last, 12*minB, gaps(at[:6]))
		}
	})
	t.Run("progress resets", func(t *testing.T) {
		// From the 5th connection on, each gets its batch acknowledged:
		// the gaps after that fall back to about BackoffMin.
		bc := newBrokenCollector(t, 5)
		run(t, bc)
		at := bc.waitAccepts(t, 9, 10*time.Second)
		for i := 6; i < 9; i++ {
			if g := at[i].Sub(at[i-1]); g > 8*minB {
				t.Errorf("gap before connection %d is %s after acknowledged progress, want about %s (gaps %v)", i+1, g, minB, gaps(at[:9]))
			}
		}
	})
}

func gaps(at []time.Time) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(at); i++ {
		d = append(d, at[i].Sub(at[i-1]).Round(time.Millisecond))
	}
	return d
}

// pipeCollector is brokenCollector in memory, for a testing/synctest
// bubble: it welcomes every agent and drops it at its first batch. For
// connection n (from 1), ack(n) says whether it acknowledges that batch
// first; with remember set, every welcome reports as held the highest
// batch any connection received, as a collector that stored batches
// without acknowledging them does. After conns connections it accepts
// no more and closes done.
type pipeCollector struct {
	ln       *testutil.PipeListener
	ack      func(n int) bool
	remember bool
	conns    int
	done     chan struct{}

	held uint64 // highest batch received
	// Fields of the accept goroutine, read after done.
	accept []time.Time
	drop   []time.Time
}

func (pc *pipeCollector) run() {
	defer close(pc.done)
	for n := 1; n <= pc.conns; n++ {
		c, err := pc.ln.Accept()
		if err != nil {
			return
		}
		pc.accept = append(pc.accept, time.Now())
		pc.serve(c, pc.ack(n))
		pc.drop = append(pc.drop, time.Now())
	}
}

// serve runs one connection to its drop, on the accept goroutine: one
// connection at a time, as the agent makes them.
func (pc *pipeCollector) serve(c net.Conn, ack bool) {
	defer c.Close()
	fr := wire.NewFrameReader(c, wire.Limits{})
	if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeHello {
		return
	}
	w := wire.Welcome{MaxFrame: 16 << 20}
	if pc.remember {
		w.LastSeq = pc.held
	}
	c.Write(wire.AppendWelcome(nil, w))
	for {
		h, p, err := fr.Next()
		if err != nil {
			return
		}
		if h.Type != wire.TypeBatch {
			continue
		}
		b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
		if err != nil {
			return
		}
		pc.held = max(pc.held, b.Seq)
		if ack {
			c.Write(wire.AppendAck(nil, b.Seq))
			// The agent has taken the ack in (its reader waits for the
			// next frame, its writer on this end) before the drop.
			synctest.Wait()
		}
		return
	}
}

// TestBackoffSchedule runs the agent's reconnect loop on the bubble's
// clock against a collector that drops it at every first batch, and
// checks each pause between a drop and the next connection against
// the backoff it must have used: the pause is that backoff times a
// jitter in [0.75, 1.25), and as the backoff doubles these ranges do
// not overlap, so each pause names its backoff exactly.
func TestBackoffSchedule(t *testing.T) {
	const minB, maxB = 100 * time.Millisecond, 800 * time.Millisecond
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 2000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	never := func(int) bool { return false }
	tests := []struct {
		name     string
		ack      func(n int) bool
		remember bool
		want     []int // backoff before each reconnect, in BackoffMin
	}{
		{name: "no progress grows to the cap", ack: never, want: []int{1, 2, 4, 8, 8, 8}},
		// Every welcome holds one batch more than the last: progress
		// the agent learns at the welcome, not a connection that
		// delivered anything.
		{name: "welcome progress only", ack: never, remember: true, want: []int{1, 2, 4, 8, 8}},
		{name: "acknowledged batch resets", ack: func(n int) bool { return n == 4 || n == 5 },
			want: []int{1, 2, 4, 1, 1, 2, 4}},
		{name: "acknowledged batch resets from the cap", ack: func(n int) bool { return n == 6 },
			want: []int{1, 2, 4, 8, 8, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				pc := &pipeCollector{ln: testutil.NewPipeListener(), ack: tt.ack, remember: tt.remember,
					conns: len(tt.want) + 1, done: make(chan struct{})}
				go pc.run()
				a, err := New(Config{Collectors: []string{"127.0.0.1:9"}, Name: "b", ReadFile: path, BatchBytes: 16 << 10, Insecure: true,
					BackoffMin: minB, BackoffMax: maxB, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				a.tr.(*tcpSender).dial = func(ctx context.Context, _ netip.AddrPort) (net.Conn, error) { return pc.ln.Dial(ctx) }
				ctx, cancel := context.WithCancel(t.Context())
				done := runAsync(ctx, a)
				<-pc.done
				cancel()
				pc.ln.Close()
				<-done

				if len(pc.accept) != pc.conns {
					t.Fatalf("%d connections, want %d", len(pc.accept), pc.conns)
				}
				for i, m := range tt.want {
					b := time.Duration(m) * minB
					pause := pc.accept[i+1].Sub(pc.drop[i])
					if pause < b*3/4 || pause >= b*5/4 {
						t.Errorf("pause before connection %d is %s, want backoff %s (%s to %s)", i+2, pause, b, b*3/4, b*5/4)
					}
				}
				if tt.remember && pc.held != uint64(pc.conns) {
					t.Errorf("collector holds batches up to %d after %d connections: the welcomes did not move the agent on", pc.held, pc.conns)
				}
				if t.Failed() {
					var got []time.Duration
					for i := range tt.want {
						got = append(got, pc.accept[i+1].Sub(pc.drop[i]))
					}
					t.Logf("pauses %v", got)
				}
			})
		})
	}
}
