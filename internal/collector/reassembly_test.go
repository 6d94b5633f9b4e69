package collector

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// bigBatch is a batch frame numbered seq of one packet of size bytes,
// each byte mark.
func bigBatch(seq uint64, size int, mark byte) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	e.Append(1_700_000_000_000_000_000+int64(seq), 0, uint32(size), bytes.Repeat([]byte{mark}, size))
	return e.Finish(seq)
}

// pieces cuts frame (numbered first) into pieces of at most room bytes.
func pieces(frame []byte, first uint64, room int) [][]byte {
	n := wire.PieceCount(len(frame), room)
	out := make([][]byte, n)
	for i := range n {
		out[i] = wire.AppendPiece(nil, first, uint32(i), uint32(n), frame)
	}
	return out
}

// udpHarness drives a UDPServer's datagram handling directly, from one
// source, without its read loop.
type udpHarness struct {
	t   *testing.T
	u   *UDPServer
	src netip.AddrPort
	dir string
}

func newUDPHarness(t *testing.T, cfg Config) *udpHarness {
	t.Helper()
	cfg.Insecure, cfg.Store.Fsync = true, store.FsyncNever
	core := newCore(t, cfg)
	t.Cleanup(func() { core.Close() })
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	u := NewUDPServer(core)
	u.conn = conn
	h := &udpHarness{t: t, u: u, src: netip.MustParseAddrPort("127.0.0.1:1000"), dir: filepath.Join(core.Dir(), "r1")}
	h.send(wire.AppendHello(nil, hello("r1", 1)))
	return h
}

func (h *udpHarness) send(ds ...[]byte) {
	for _, d := range ds {
		h.u.datagram(d, h.src, time.Now())
	}
}

// end ends the session (as a goodbye) and returns its counts and the
// first byte of every packet written, in order.
func (h *udpHarness) end() (UDPAgentCounts, []byte) {
	h.t.Helper()
	h.send(wire.AppendBye(nil))
	var marks []byte
	if _, err := os.Stat(h.dir); err != nil {
		return h.u.AgentCounts()["r1"], nil // nothing written
	}
	pkts, _ := readDir(h.t, h.dir)
	for _, p := range pkts {
		marks = append(marks, p.Data[0])
	}
	return h.u.AgentCounts()["r1"], marks
}

// TestUDPReassembly: batches sent in pieces are written once complete,
// whatever the order; lost, duplicated, inconsistent and overlapping
// pieces are counted as the window and the reassembly rules say.
func TestUDPReassembly(t *testing.T) {
	const room = 1000
	b1, b5 := bigBatch(1, 3000, 'a'), bigBatch(5, 3000, 'b') // 4 pieces each: numbers 1-4 and 5-8
	p1, p5 := pieces(b1, 1, room), pieces(b5, 5, room)
	small := func(seq uint64) []byte { return udpBatch(seq) } // 10 packets, marks 10*(seq-1)...
	corrupt := bytes.Clone(p1[2])
	corrupt[len(corrupt)-1] ^= 1
	otherCount := wire.AppendPiece(nil, 1, 3, 5, b1[:len(b1)-1]) // "5 pieces" of batch 1
	overlap := wire.AppendPiece(nil, 3, 0, 2, bigBatch(3, 2000, 'x'))
	tests := []struct {
		name  string
		sends [][]byte
		want  UDPAgentCounts
		marks string // first byte of each packet written
	}{
		{"in order", [][]byte{p1[0], p1[1], p1[2], p1[3], small(9)},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 5, Lost: 4}, Pieces: 4, Reassembled: 1}, "a" + marks(9)},
		{"reversed", [][]byte{p1[3], p1[2], p1[1], p1[0]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 4, Reordered: 3}, Pieces: 4, Reassembled: 1}, "a"},
		{"interleaved batches", [][]byte{p1[0], p5[0], p1[1], p5[1], p1[2], p5[2], p5[3], p1[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 8, Reordered: 3}, Pieces: 8, Reassembled: 2}, "ba"},
		{"duplicate piece", [][]byte{p1[0], p1[0], p1[1], p1[2], p1[3], p1[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 6, Duplicates: 2}, Pieces: 6, Reassembled: 1}, "a"},
		{"piece lost, session ends", [][]byte{p1[0], p1[1], p1[3], p5[0], p5[1], p5[2], p5[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 7, Lost: 1, Reordered: 0}, Pieces: 7, Reassembled: 1, Incomplete: 1}, "b"},
		{"piece lost, leaves the window", [][]byte{p1[0], p1[1], p1[3], small(3 + windowSize), p1[2]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 5, Lost: windowSize - 1, Late: 1}, Pieces: 4, Incomplete: 1}, marks(3 + windowSize)},
		{"bad checksum", [][]byte{p1[0], p1[1], corrupt, p1[3], small(5)},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 5, Reordered: 0}, Malformed: 1, Pieces: 4}, marks(5)},
		{"other count", [][]byte{p1[0], otherCount, p1[1], p1[2], p1[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 4}, Malformed: 1, Pieces: 4, Reassembled: 1}, "a"},
		{"overlap", [][]byte{p1[0], overlap, p1[1], p1[2], p1[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 4}, Malformed: 1, Pieces: 4, Reassembled: 1}, "a"},
		{"batch and its pieces numbered apart", [][]byte{pieces(bigBatch(2, 3000, 'z'), 1, room)[0], p1[1], p1[2], p1[3]},
			UDPAgentCounts{SeqCounts: SeqCounts{Received: 4}, Malformed: 1, Pieces: 4}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newUDPHarness(t, Config{})
			h.send(tc.sends...)
			got, m := h.end()
			if got != tc.want {
				t.Errorf("counts %+v,\n          want %+v", got, tc.want)
			}
			if string(m) != tc.marks {
				t.Errorf("packets written %q, want %q", m, tc.marks)
			}
			if n := h.u.rsBytes; n != 0 || h.u.rsHead != nil {
				t.Errorf("%d bytes still held for reassembly", n)
			}
		})
	}
}

// marks is what readDir finds for udpBatch(seq): its 10 packets' first
// bytes.
func marks(seq uint64) string {
	var b []byte
	for i := range 10 {
		b = append(b, byte(10*int(seq-1)+i))
	}
	return string(b)
}

// TestUDPReassemblyLimits: a session holds at most udpMaxInProgress
// batches in progress, all sessions together at most the budget; over
// either the oldest incomplete batch is dropped and counted, and a frame
// larger than the budget is refused before anything is kept for it.
func TestUDPReassemblyLimits(t *testing.T) {
	t.Run("per session", func(t *testing.T) {
		h := newUDPHarness(t, Config{})
		seq := uint64(1)
		for range udpMaxInProgress + 1 {
			h.send(pieces(bigBatch(seq, 2000, 'p'), seq, 1000)[0]) // piece 0 of 3
			seq += 3
		}
		if n := len(h.u.peers[h.src].rs); n != udpMaxInProgress {
			t.Fatalf("%d batches in progress, want %d", n, udpMaxInProgress)
		}
		got, _ := h.end()
		if got.Incomplete != udpMaxInProgress+1 || h.u.Counters.Evicted.Load() != 0 {
			t.Errorf("counts %+v, evicted %d; want %d incomplete, none evicted", got, h.u.Counters.Evicted.Load(), udpMaxInProgress+1)
		}
	})
	t.Run("budget", func(t *testing.T) {
		h := newUDPHarness(t, Config{UDPReassemblyBytes: 64 << 10})
		b1, b2 := bigBatch(1, 40<<10, 'a'), bigBatch(100, 30<<10, 'b')
		p1, p2 := pieces(b1, 1, 8000), pieces(b2, 100, 8000)
		h.send(p1[0])
		if got := h.u.Counters.ReassemblyBytes.Load(); got != int64(len(b1)) {
			t.Fatalf("reassembly holds %d bytes, want %d", got, len(b1))
		}
		h.send(p2...) // does not fit beside batch 1: evicts it
		h.send(p1[1:]...)
		h.send(pieces(bigBatch(200, 70<<10, 'c'), 200, 8000)[0]) // over the budget alone
		got, m := h.end()
		want := UDPAgentCounts{SeqCounts: SeqCounts{Received: len64(p1) + len64(p2), Lost: 99 - len64(p1), Reordered: len64(p1) - 1},
			Malformed: 1, Pieces: len64(p1) + len64(p2), Reassembled: 1, Incomplete: 2}
		if got != want || string(m) != "b" || h.u.Counters.Evicted.Load() != 1 {
			t.Errorf("counts %+v,\n  want %+v; written %q, evicted %d", got, want, m, h.u.Counters.Evicted.Load())
		}
		if h.u.Counters.ReassemblyBytes.Load() != 0 {
			t.Errorf("reassembly still holds %d bytes", h.u.Counters.ReassemblyBytes.Load())
		}
	})
}

func len64[T any](s []T) uint64 { return uint64(len(s)) }

// TestUDPReassemblyAllocs: putting a batch of a 1500-byte packet back
// together allocates nothing once warm (buffers are reused).
func TestUDPReassemblyAllocs(t *testing.T) {
	h := newUDPHarness(t, Config{})
	var all [][]byte
	for i := range uint64(102) {
		all = append(all, pieces(bigBatch(1+2*i, 1500, 'q'), 1+2*i, 1472-wire.PieceOverhead)...)
	}
	round := func() {
		h.send(all[0], all[1])
		all = all[2:]
	}
	round()
	if allocs := testing.AllocsPerRun(100, round); allocs > 0 {
		t.Errorf("%.1f allocations per batch in pieces, want 0", allocs)
	}
	if got, _ := h.end(); got.Reassembled != 102 || got.Malformed != 0 {
		t.Errorf("counts %+v", got)
	}
}
