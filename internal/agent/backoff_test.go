package agent

import (
	"context"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
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
// connection gets a batch acknowledged, the backoff starts over.
func TestBackoffGrowsWithoutProgress(t *testing.T) {
	const minB = 10 * time.Millisecond
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 2000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, bc *brokenCollector) {
		t.Helper()
		a, err := New(Config{Collector: bc.ln.Addr().String(), Name: "b", ReadFile: path, BatchBytes: 16 << 10, Insecure: true,
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
