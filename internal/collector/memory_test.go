package collector

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

func TestReadMemoryValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", Config{}, true},
		{"at max frame", Config{ReadMemory: 16 << 20}, true},
		{"below max frame", Config{ReadMemory: 16<<20 - 1}, false},
		{"below a set max frame", Config{MaxFrame: 1 << 20, ReadMemory: 1<<20 - 1}, false},
		{"small with small frames", Config{MaxFrame: 64 << 10, ReadMemory: 64 << 10}, true},
		{"default below a large max frame", Config{MaxFrame: 1 << 30}, false},
		{"negative", Config{ReadMemory: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Store.Dir = "x"
			if err := tt.cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate = %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// stallBatch returns a batch frame of seq 1 whose payload fills the
// 1 MiB size class (with the header read ahead), and its packets.
func stallBatch(t *testing.T) (frame []byte, pkts [][]byte) {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := 0; e.Len() < 1<<20-2100; i++ {
		p := bytes.Repeat([]byte{byte(i)}, 1000)
		e.Append(int64(1_700_000_000_000_000_000+i), 0, 1000, p)
		pkts = append(pkts, p)
	}
	frame = e.Finish(1)
	if n := len(frame) - wire.HeaderSize; n <= 896<<10 || n > 1<<20-wire.HeaderSize {
		t.Fatalf("payload of %d bytes is not in the 1 MiB class", n)
	}
	return frame, pkts
}

// helloN is a hello for name with instance id n.
func helloN(name string, n int) *wire.Hello {
	h := hello(name, 0)
	h.Instance[0], h.Instance[1] = byte(n), byte(n>>8)
	return h
}

// dialN connects and sends a hello for name, of instance n.
func dialN(t *testing.T, addr, name string, n int) *agentConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := conn.Write(wire.AppendHello(nil, helloN(name, n))); err != nil {
		t.Fatal(err)
	}
	return &agentConn{conn: conn, fr: wire.NewFrameReader(conn, wire.Limits{})}
}

// heapInUse returns the heap and stacks in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// TestReadMemoryStalledSessions: 100 sessions each send all but 100
// bytes of a 1 MiB batch and stall. Only as many as the budget holds
// get a buffer; the others wait without reading, and the heap stays
// near the budget. Another agent still connects and writes small
// batches meanwhile. When the stalled sessions finish their frames,
// the waiting ones continue and every batch is written exactly.
func TestReadMemoryStalledSessions(t *testing.T) {
	const sessions, budget = 100, 8<<20 + 512<<10
	ts := startServer(t, Config{Insecure: true, MaxFrame: 1 << 20, ReadMemory: budget, PeerTimeout: time.Minute})
	frame, pkts := stallBatch(t)
	cut := len(frame) - 100
	base := heapInUse()

	conns := make([]*agentConn, sessions)
	for i := range conns {
		conns[i] = dialN(t, ts.addr, fmt.Sprintf("stall-%03d", i), i)
		if ok, reason, err := conns[i].reply(); !ok {
			t.Fatalf("session %d: %s %v", i, reason, err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*sessions)
	for _, s := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.conn.Write(frame[:cut]); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait() // into the collector's socket buffers, read or not
	holders := int(budget / (1 << 20))
	mem := func() wire.MemoryStats { return ts.core.ReadMemory() }
	testutil.Eventually(t, 5*time.Second, func() error {
		if st := mem(); st.Waiting != sessions-holders {
			return fmt.Errorf("%d sessions wait for read memory, want %d: %+v", st.Waiting, sessions-holders, st)
		}
		return nil
	})
	heap := heapInUse() - base
	t.Logf("%d sessions stalled in a 1 MiB frame: heap and stacks grew by %d KiB; read memory %+v", sessions, heap>>10, mem())
	if heap > budget+16<<20 {
		t.Fatalf("heap and stacks grew by %d KiB, want under the budget of %d KiB and 16 MiB", heap>>10, budget>>10)
	}
	if st := mem(); st.Reserved != int64(holders)<<20 || st.Waiting != sessions-holders {
		t.Fatalf("%d bytes reserved and %d sessions waiting, want %d buffers of 1 MiB and the other %d: %+v", st.Reserved, st.Waiting, holders, sessions-holders, st)
	}

	other := dialN(t, ts.addr, "other", sessions)
	if ok, reason, err := other.reply(); !ok {
		t.Fatalf("another agent: %s %v", reason, err)
	}
	other.deliver(t, 3)
	if st := mem(); st.Waiting != sessions-holders {
		t.Fatalf("after the other agent: %+v", st)
	}

	for _, s := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.conn.Write(frame[cut:]); err != nil {
				errs <- err
				return
			}
			for {
				h, p, err := s.fr.Next()
				if err != nil {
					errs <- err
					return
				}
				if seq, _ := wire.ParseAck(p); h.Type == wire.TypeAck && seq == 1 {
					break
				}
			}
			s.conn.(*net.TCPConn).CloseWrite()
			if _, _, err := s.fr.Next(); err != io.EOF {
				errs <- fmt.Errorf("after goodbye: %v", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitSessionsEnded(t, ts.core)
	if st := mem(); st.Reserved != 0 || st.Waiting != 0 || st.Waits < sessions-uint64(holders) {
		t.Fatalf("at the end: %+v", st)
	}
	for i := range conns {
		got, _ := readDir(t, filepath.Join(ts.core.Dir(), fmt.Sprintf("stall-%03d", i)))
		if len(got) != len(pkts) {
			t.Fatalf("session %d: %d packets written, want %d", i, len(got), len(pkts))
		}
		for k := range got {
			if !bytes.Equal(got[k].Data, pkts[k]) {
				t.Fatalf("session %d: packet %d differs", i, k)
			}
		}
	}
}

// TestIdleConnectionsMemory: 2000 connections that sent nothing, then
// 2000 sessions after their hello, each cost the collector little (and
// the test's own client sockets are counted too).
func TestIdleConnectionsMemory(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("the race detector's shadow memory makes heap sizes meaningless")
	}
	const conns, perConn = 2000, 16 << 10
	dir := t.TempDir()
	core, err := NewCore(Config{Store: store.Config{Dir: dir}, Insecure: true, HandshakeTimeout: time.Minute, PeerTimeout: time.Minute, Heartbeat: 30 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(core)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	open := func() int { srv.mu.Lock(); defer srv.mu.Unlock(); return len(srv.conns) }
	clients := make([]net.Conn, 0, conns)
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
		cancel()
		<-served
		core.Close()
	})

	base := heapInUse()
	for range conns {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := open(); n != conns {
			return fmt.Errorf("%d of %d connections accepted", n, conns)
		}
		return nil
	})
	before := heapInUse() - base
	t.Logf("%d connections before their hello: %d bytes each", conns, before/conns)
	if before > conns*perConn {
		t.Errorf("%d connections before their hello take %d bytes, %d each, want under %d", conns, before, before/conns, perConn)
	}

	for i, c := range clients {
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write(wire.AppendHello(nil, helloN(fmt.Sprintf("idle-%04d", i), i))); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range clients {
		h, _, err := wire.NewFrameReader(c, wire.Limits{}).Next()
		if err != nil || h.Type != wire.TypeWelcome {
			t.Fatalf("connection %d: %s %v, want a welcome", i, h.Type, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := core.Counters.Sessions.Load(); n != conns {
			return fmt.Errorf("%d of %d sessions begun", n, conns)
		}
		return nil
	})
	after := heapInUse() - base
	t.Logf("%d sessions after their hello: %d bytes each", conns, after/conns)
	if after > conns*perConn {
		t.Errorf("%d idle sessions take %d bytes, %d each, want under %d", conns, after, after/conns, perConn)
	}
	if st := core.ReadMemory(); st.Reserved != 0 {
		t.Errorf("idle sessions hold read memory: %+v", st)
	}
}
