package collector

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// pipeServer runs a Core and its Server on a testutil.PipeListener
// inside the caller's synctest bubble, and stops both in t.Cleanup.
func pipeServer(t *testing.T, cfg Config) (*Core, *testutil.PipeListener, *testutil.Buffer) {
	t.Helper()
	cfg.Store.Dir = t.TempDir()
	cfg.Store.Fsync = store.FsyncNever
	lb := &testutil.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(lb, nil))
	core, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-core.Store().Repaired()
	ln := testutil.NewPipeListener()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(core).Serve(ctx, ln) }()
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
	return core, ln, lb
}

// frameAt is a frame a pipe agent received, and when.
type frameAt struct {
	typ wire.Type
	seq uint64 // of an ack
	at  time.Time
	err error // the read's error; the last one sent
}

// pipeAgent dials ln, sends name's hello and reads the welcome; then a
// goroutine reads every frame into the returned channel (a net.Pipe
// needs a reader for the server's writes to complete) until the
// connection ends, which it sends as a frameAt with err set.
func pipeAgent(t *testing.T, ln *testutil.PipeListener, name string) (net.Conn, <-chan frameAt) {
	t.Helper()
	c, err := ln.Dial(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(wire.AppendHello(nil, hello(name, name[0]))); err != nil {
		t.Fatal(err)
	}
	fr := wire.NewFrameReader(c, wire.Limits{})
	if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeWelcome {
		t.Fatalf("%s: %s %v, want a welcome", name, h.Type, err)
	}
	frames := make(chan frameAt, 1024)
	go func() {
		for {
			h, p, err := fr.Next()
			f := frameAt{typ: h.Type, at: time.Now(), err: err}
			if err == nil && h.Type == wire.TypeAck {
				f.seq, _ = wire.ParseAck(p)
			}
			frames <- f
			if err != nil {
				return
			}
		}
	}()
	return c, frames
}

// TestPeerTimeout: an agent that goes silent after its hello gets a
// heartbeat (the last ack again) every Heartbeat and is cut off exactly
// PeerTimeout after the server's last read; one that pings stays, ten
// peer timeouts long, and then delivers over the same connection. In a
// synctest bubble over in-memory connections, so the times are exact.
func TestPeerTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const heartbeat, peerTimeout = 100 * time.Millisecond, 500 * time.Millisecond
		core, ln, log := pipeServer(t, Config{Insecure: true, Heartbeat: heartbeat, PeerTimeout: peerTimeout})

		_, silent := pipeAgent(t, ln, "silent")
		welcomed := time.Now()
		var beats []time.Duration
		for f := range silent {
			if f.err != nil {
				if !errors.Is(f.err, io.EOF) {
					t.Fatalf("silent agent: %v, want EOF", f.err)
				}
				if d := f.at.Sub(welcomed); d != peerTimeout {
					t.Errorf("silent agent cut off %s after its welcome, want %s", d, peerTimeout)
				}
				break
			}
			if f.typ != wire.TypeAck || f.seq != 0 {
				t.Fatalf("heartbeat: %s %d, want ack 0", f.typ, f.seq)
			}
			beats = append(beats, f.at.Sub(welcomed))
		}
		// One heartbeat each 100ms; the one due at the cut-off may
		// or may not go out first.
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond, 400 * time.Millisecond}
		if len(beats) == 5 && beats[4] == peerTimeout {
			beats = beats[:4]
		}
		if !slices.Equal(beats, want) {
			t.Errorf("heartbeats at %v after the welcome, want %v", beats, want)
		}
		synctest.Wait() // the session's end is counted and logged
		if n := core.Counters.PeerTimeouts.Load(); n != 1 {
			t.Errorf("PeerTimeouts = %d, want 1", n)
		}
		if !strings.Contains(log.String(), "peer timeout") {
			t.Error("no log line about the peer timeout")
		}

		pinger, frames := pipeAgent(t, ln, "pinger")
		for range 10 * peerTimeout / heartbeat {
			time.Sleep(heartbeat) // the agent's heartbeat: the pace is the subject
			if _, err := pinger.Write(wire.AppendPing(nil)); err != nil {
				t.Fatalf("pinging agent after %s: %v", 10*peerTimeout, err)
			}
		}
		var e wire.BatchEncoder
		for seq := uint64(1); seq <= 2; seq++ {
			e.Reset(nil)
			e.Append(int64(seq), 0, 10, []byte("0123456789"))
			if _, err := pinger.Write(e.Finish(seq)); err != nil {
				t.Fatal(err)
			}
		}
		for f := range frames {
			if f.err != nil {
				t.Fatalf("pinging agent: %v before the ack of batch 2", f.err)
			}
			if f.typ == wire.TypeAck && f.seq == 2 {
				break
			}
		}
		pinger.Close()
		synctest.Wait()
		if n := core.Counters.PeerTimeouts.Load(); n != 1 {
			t.Errorf("PeerTimeouts = %d after the pinger, want 1", n)
		}
	})
}
