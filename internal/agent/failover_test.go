package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestValidateCollectors: the rules for Config.Collectors.
func TestValidateCollectors(t *testing.T) {
	many := make([]string, MaxCollectors+1)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.0.%d", i+1)
	}
	tests := []struct {
		name    string
		addrs   []string
		wantErr string // "" for valid
	}{
		{"one host", []string{"coll"}, ""},
		{"one host and port", []string{"coll:7000"}, ""},
		{"ipv6 bare and bracketed", []string{"::1", "[::2]", "[::3]:9"}, ""},
		{"a list", []string{"a:1", "b:1", "a:2"}, ""},
		{"the most", many[:MaxCollectors], ""},
		{"none", nil, "collector address is required"},
		{"too many", many, fmt.Sprintf("%d collector addresses, at most %d", MaxCollectors+1, MaxCollectors)},
		{"an empty entry", []string{"a", ""}, `collector address "": empty, or holds a comma or white space`},
		{"a comma inside", []string{"a,b"}, `collector address "a,b": empty, or holds a comma`},
		{"white space", []string{"a b"}, `collector address "a b": empty, or holds a comma`},
		{"no host", []string{":7733"}, `collector address ":7733": no host`},
		{"port zero", []string{"a:0"}, `port "0": want a number in 1..65535`},
		{"port too big", []string{"a:65536"}, `port "65536": want a number in 1..65535`},
		{"port a name", []string{"a:http"}, ""},
		{"no port", []string{"a:"}, `collector address "a:": no port after the colon`},
		{"twice", []string{"a", "b", "a:7733"}, `collector address "a:7733" given twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Config{Collectors: tt.addrs, ReadFile: "x", Insecure: true}
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate: %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate: %v, want %q", err, tt.wantErr)
			case err != nil && !slices.Contains(fieldKeys(err), "agent.Collectors"):
				t.Errorf("Validate: %v does not name the field Collectors", err)
			}
		})
	}
}

// TestResolveCollectors: each collector gets its address (the default
// port where none is given) and, over TLS, the server name of its own
// host unless one is set for all; two entries for one address and port
// are refused.
func TestResolveCollectors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 1, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		addrs      []string
		serverName string
		want       []string // address and server name of each
		wantErr    string
	}{
		{name: "own host each", addrs: []string{"127.0.0.1", "[::1]:9000"},
			want: []string{"127.0.0.1:7733 127.0.0.1", "[::1]:9000 ::1"}},
		{name: "one name for all", addrs: []string{"127.0.0.1:1", "127.0.0.2:1"}, serverName: "coll.example",
			want: []string{"127.0.0.1:1 coll.example", "127.0.0.2:1 coll.example"}},
		{name: "one address twice", addrs: []string{"127.0.0.1:5", "[::ffff:127.0.0.1]:5"},
			wantErr: `collector addresses "127.0.0.1:5" and "[::ffff:127.0.0.1]:5" are both 127.0.0.1:5`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(Config{Collectors: tt.addrs, Name: "r", ReadFile: path, TLS: tlsWithName(tt.serverName), Logger: quiet})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New: %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, ep := range a.collectors {
				got = append(got, ep.addr.String()+" "+ep.tls.ServerName)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("collectors %q, want %q", got, tt.want)
			}
		})
	}
}

// fakeTCPCollector is one collector of TestFailoverRotation, reached
// through tcpSender.dial inside a synctest bubble: down (the dial is
// refused) or up, acknowledging every batch and, with dropAfter > 0,
// dropping each connection after that many batches. It keeps what it
// received, as a collector with a root of its own would.
type fakeTCPCollector struct {
	down      bool
	dropAfter int

	mu   sync.Mutex
	held uint64   // highest batch received
	seqs []uint64 // every batch received, in order
}

func (fc *fakeTCPCollector) serve(c net.Conn) {
	defer c.Close()
	fr := wire.NewFrameReader(c, wire.Limits{})
	if h, _, err := fr.Next(); err != nil || h.Type != wire.TypeHello {
		return
	}
	fc.mu.Lock()
	w := wire.Welcome{MaxFrame: 16 << 20, LastSeq: fc.held}
	fc.mu.Unlock()
	if _, err := c.Write(wire.AppendWelcome(nil, w)); err != nil {
		return
	}
	for n := 0; fc.dropAfter == 0 || n < fc.dropAfter; {
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
		fc.mu.Lock()
		fc.held = max(fc.held, b.Seq)
		fc.seqs = append(fc.seqs, b.Seq)
		fc.mu.Unlock()
		if _, err := c.Write(wire.AppendAck(nil, b.Seq)); err != nil {
			return
		}
		n++
	}
	// The agent has taken the last ack in before the drop.
	synctest.Wait()
}

// dialRecord is one dial of the agent: to which collector, and when.
type dialRecord struct {
	i  int
	at time.Duration // since the start of the bubble
}

// TestFailoverRotation runs the agent's sender on the bubble's clock
// against three collectors and checks the order it dials them in, the
// pauses between dials, the failovers counted, and that the batches
// reached the collectors once each, the one failed over to resuming
// after what the previous one acknowledged.
func TestFailoverRotation(t *testing.T) {
	const minB, maxB = 100 * time.Millisecond, 400 * time.Millisecond
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 2000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		colls     []fakeTCPCollector
		dials     int             // stop after this many (0: run to the end of the replay)
		wantOrder []int           // collectors dialled, in order
		wantPause []time.Duration // backoff before each dial (0: at once), in units of minB
		wantFail  uint64
	}{
		{name: "first down: the second, and stays", colls: []fakeTCPCollector{{down: true}, {}, {}},
			wantOrder: []int{0, 1}, wantPause: []time.Duration{0, 0}, wantFail: 1},
		{name: "lost after progress: the next at once, round robin", colls: []fakeTCPCollector{{dropAfter: 3}, {down: true}, {dropAfter: 3}},
			wantOrder: []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}, wantPause: make([]time.Duration, 12)},
		{name: "all down: the backoff after each round", colls: []fakeTCPCollector{{down: true}, {down: true}, {down: true}}, dials: 12,
			wantOrder: []int{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2},
			wantPause: []time.Duration{0, 0, 0, 1, 0, 0, 2, 0, 0, 4, 0, 0}, wantFail: 11},
		{name: "one collector: the backoff after each failure", colls: []fakeTCPCollector{{down: true}}, dials: 4,
			wantOrder: []int{0, 0, 0, 0}, wantPause: []time.Duration{0, 1, 2, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				var addrs []string
				byAddr := map[netip.AddrPort]int{}
				for i := range tt.colls {
					ap := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 7733)
					addrs = append(addrs, ap.String())
					byAddr[ap] = i
				}
				a, err := New(Config{Collectors: addrs, Name: "f", ReadFile: path, BatchBytes: 16 << 10, Insecure: true,
					BackoffMin: minB, BackoffMax: maxB, ShutdownTimeout: time.Second, Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var dials []dialRecord
				var failovers uint64 // at the last dial recorded
				a.tr.(*tcpSender).dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
					i := byAddr[ap]
					if tt.dials == 0 || len(dials) < tt.dials {
						dials = append(dials, dialRecord{i, time.Since(start)})
						failovers = a.failovers.Load()
					}
					if tt.dials > 0 && len(dials) == tt.dials {
						cancel() // the agent dials on until its shutdown timeout
					}
					if tt.colls[i].down {
						return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
					}
					client, server := net.Pipe()
					go tt.colls[i].serve(server)
					return client, nil
				}
				r := <-runAsync(ctx, a)
				if r.err != nil {
					t.Fatalf("Run: %v", r.err)
				}
				var order []int
				for _, d := range dials {
					order = append(order, d.i)
				}
				if tt.dials == 0 {
					// Run to the end: the stream ends with the last
					// dial; compare as many as are wanted.
					if r.sum.Acked != 2000 {
						t.Errorf("acknowledged %d packets, want 2000", r.sum.Acked)
					}
					if len(order) < len(tt.wantOrder) {
						t.Fatalf("dialled %v, want at least %v", order, tt.wantOrder)
					}
					if tt.wantFail == 0 {
						tt.wantFail = uint64(len(order) - 1)
					}
					order = order[:len(tt.wantOrder)]
				}
				if !slices.Equal(order, tt.wantOrder) {
					t.Errorf("dialled %v, want %v", order, tt.wantOrder)
				}
				for i, m := range tt.wantPause {
					if i >= len(dials) {
						break
					}
					var pause time.Duration
					if i > 0 {
						pause = dials[i].at - dials[i-1].at
					}
					b := m * minB
					if b == 0 && pause != 0 || b > 0 && (pause < b*3/4 || pause >= b*5/4) {
						t.Errorf("pause before dial %d is %s, want backoff %s (±25%%)", i+1, pause, b)
					}
				}
				if tt.dials == 0 {
					failovers = r.sum.Failovers
				}
				if failovers != tt.wantFail {
					t.Errorf("%d failovers, want %d", failovers, tt.wantFail)
				}
				if tt.dials > 0 {
					return
				}
				// Every batch reached a collector; each collector got each
				// batch at most once, and a collector taking over starts
				// right after what the agent had acknowledged.
				seen := map[uint64]bool{}
				for i := range tt.colls {
					fc := &tt.colls[i]
					if !slices.IsSorted(fc.seqs) || len(slices.Compact(slices.Clone(fc.seqs))) != len(fc.seqs) {
						t.Errorf("collector %d received batches %v: out of order or twice", i, fc.seqs)
					}
					for _, s := range fc.seqs {
						seen[s] = true
					}
				}
				last := a.q.stats().lastSeq
				for s := uint64(1); s <= last; s++ {
					if !seen[s] {
						t.Errorf("batch %d reached no collector", s)
					}
				}
			})
		})
	}
}

// TestRejectStopsFailover: a collector that rejects the agent stops it
// with the reason, although the next one would take it: a refusal is a
// configuration error, not an outage.
func TestRejectStopsFailover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "in.pcap")
		if err := gen.WriteFile(path, gen.FileConfig{Count: 100, Mix: gen.Mix64}); err != nil {
			t.Fatal(err)
		}
		a, err := New(Config{Collectors: []string{"10.0.0.1", "10.0.0.2"}, Name: "rj", ReadFile: path, Insecure: true, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		var dials int
		a.tr.(*tcpSender).dial = func(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
			dials++
			client, server := net.Pipe()
			go func() {
				defer server.Close()
				fr := wire.NewFrameReader(server, wire.Limits{})
				fr.Next()
				server.Write(wire.AppendReject(nil, "bad token"))
			}()
			return client, nil
		}
		r := <-runAsync(t.Context(), a)
		if !errors.Is(r.err, ErrRejected) || !strings.Contains(r.err.Error(), "bad token") {
			t.Errorf("Run: %v, want the rejection", r.err)
		}
		if dials != 1 || r.sum.Failovers != 0 {
			t.Errorf("%d dials, %d failovers; want 1 and none", dials, r.sum.Failovers)
		}
	})
}

// TestUDPFailover: over UDP the agent moves on from a collector whose
// port is closed (the kernel reports ECONNREFUSED from the ICMP port
// unreachable) to the next, which then gets the stream.
func TestUDPFailover(t *testing.T) {
	probe, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := probe.LocalAddr().String()
	probe.Close() // nothing listens there
	uc := startUDPCollector(t, collector.Config{})
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 20000, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	lb := &testutil.Buffer{}
	a, err := New(Config{Collectors: []string{closed, uc.addr}, Name: "uf", ReadFile: path, Insecure: true, Transport: TransportUDP,
		MaxRate: 20000, Logger: testLogger(lb)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	r := <-runAsync(ctx, a)
	if r.err != nil || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v); log:\n%s", r.err, ctx.Err(), lb.String())
	}
	uc.waitEnded(t, "uf")
	uc.stop()
	got := uc.srv.AgentCounts()["uf"]
	if r.sum.Failovers != 1 || got.Received == 0 {
		t.Errorf("%d failovers, the second collector received %d datagrams; want 1 and some; log:\n%s", r.sum.Failovers, got.Received, lb.String())
	}
	if !strings.Contains(lb.String(), "failing over to the next") {
		t.Errorf("no failover logged:\n%s", lb.String())
	}
}

// tlsWithName returns a client TLS configuration verifying name ("":
// each collector's host).
func tlsWithName(name string) *tls.Config { return &tls.Config{ServerName: name} }

// testLogger logs as text into b.
func testLogger(b *testutil.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

// fieldKeys returns the fields err's fielderr.Error names.
func fieldKeys(err error) []string {
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		return nil
	}
	return fe.Keys()
}
