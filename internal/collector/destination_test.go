package collector

import (
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// instantSink makes every frame durable as it is sent.
type instantSink struct {
	mu     sync.Mutex
	frames [][]byte
	hellos [][]byte
}

func (f *instantSink) Send(_ string, hello, _, frame []byte, done func(error)) {
	f.mu.Lock()
	f.frames = append(f.frames, append([]byte(nil), frame...))
	f.hellos = append(f.hellos, append([]byte(nil), hello...))
	f.mu.Unlock()
	done(nil)
}

func (f *instantSink) MaxFrame(string, []byte) uint32 { return 0 }

// TestDestinationContract runs one session against both destinations
// (a store's files and a sink's records) and holds them to the same
// contract: a batch that does not validate is refused whole, a
// duplicate is dropped, an interface declared in the session counts
// for the batches after it, a Stats frame naming an undeclared
// interface is refused, commit returns the highest durable sequence,
// and the counters, AgentStats and onAck agree on what arrived.
func TestDestinationContract(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		core func(t *testing.T) *Core
		// delivered returns the packets the destination holds.
		delivered func(t *testing.T, c *Core) int
	}{
		{"store", func(t *testing.T) *Core { return newCore(t, Config{}) },
			func(t *testing.T, c *Core) int {
				pkts, _ := readDir(t, filepath.Join(c.Dir(), "c1"))
				return len(pkts)
			}},
		{"sink", func(t *testing.T) *Core {
			c, err := NewCore(Config{Sink: &instantSink{}, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}, func(t *testing.T, c *Core) int {
			sink := c.cfg.Sink.(*instantSink)
			n := 0
			for i, f := range sink.frames {
				h, p, _, err := wire.NextFrame(f, wire.Limits{})
				if err != nil || h.Type != wire.TypeBatch {
					continue // a Stats frame
				}
				b, err := wire.ParseBatch(h.Flags, p, wire.BatchLimits{})
				if err != nil {
					t.Fatalf("frame %d: %v", i, err)
				}
				hl, err := wire.ParseHello(sink.hellos[i][wire.HeaderSize:])
				if err != nil || len(hl.Interfaces) != 2 {
					t.Fatalf("hello of frame %d: %+v %v: want both interfaces declared", i, hl, err)
				}
				n += int(b.Count)
			}
			return n
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.core(t)
			defer c.Close()
			h := hello("c1", 1)
			tun0 := h.Interfaces[1]
			h.Interfaces = h.Interfaces[:1]
			var acked []uint64
			s, w, err := c.begin(h, Peer{}, func() {})
			if err != nil || w.LastSeq != 0 {
				t.Fatalf("begin: %v %+v", err, w)
			}
			s.onAck = func(seq uint64) { acked = append(acked, seq) }
			// batchPayload's records alternate between interfaces 0 and 1.
			if _, err := s.batch(0, batchPayload(1, 0, 10)); err == nil {
				t.Fatal("a batch naming an undeclared interface was taken")
			}
			if err := s.iface(wire.AppendIface(nil, 1, &tun0)[wire.HeaderSize:]); err != nil {
				t.Fatal(err)
			}
			for seq := range uint64(2) {
				if dup, err := s.batch(0, batchPayload(seq+1, int(seq)*10, 10)); dup || err != nil {
					t.Fatalf("batch %d: dup %v, %v", seq+1, dup, err)
				}
			}
			if dup, err := s.batch(0, batchPayload(2, 10, 10)); !dup || err != nil {
				t.Fatalf("batch 2 again: dup %v, %v; want a duplicate", dup, err)
			}
			bad := wire.AppendStats(nil, &wire.Stats{Time: time.Now().UnixNano(), Interfaces: []wire.IfaceStats{{Index: 5}}})
			if err := s.recordStats(bad[wire.HeaderSize:]); err == nil {
				t.Error("stats of an undeclared interface were taken")
			}
			good := wire.AppendStats(nil, &wire.Stats{Time: time.Now().UnixNano(), Interfaces: []wire.IfaceStats{{Index: 1, Captured: 20}}})
			if err := s.recordStats(good[wire.HeaderSize:]); err != nil {
				t.Fatal(err)
			}
			if seq, err := s.commit(); seq != 2 || err != nil {
				t.Fatalf("commit: %d %v, want 2", seq, err)
			}
			if got := c.AgentStats(); len(got) != 1 || got[0].LastSeqAcked != 2 || got[0].LastSeqReceived != 2 || got[0].Packets != 20 {
				t.Errorf("AgentStats %+v: want seq 2 received and acknowledged, 20 packets", got)
			}
			s.end(true)
			if got := tc.delivered(t, c); got != 20 {
				t.Errorf("%d packets delivered, want 20", got)
			}
			k := &c.Counters
			if k.Batches.Load() != 2 || k.Packets.Load() != 20 || k.Duplicates.Load() != 1 || k.MissingBatches.Load() != 0 {
				t.Errorf("counters: %d batches, %d packets, %d duplicates, %d missing; want 2, 20, 1, 0",
					k.Batches.Load(), k.Packets.Load(), k.Duplicates.Load(), k.MissingBatches.Load())
			}
			if tc.name == "sink" && (len(acked) == 0 || acked[len(acked)-1] != 2) {
				t.Errorf("acknowledged %v as the sink answered, want up to 2", acked)
			}
		})
	}
}
