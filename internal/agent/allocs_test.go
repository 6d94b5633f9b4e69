package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/pcapsync/pcapsync/internal/raceflag"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestBuilderSteadyStateAllocs: the agent's per-packet path (read a
// packet from a file, append it to the batch being built, seal full
// batches into the queue, release them on acknowledgement) allocates
// nothing once the batch pool is warm.
func TestBuilderSteadyStateAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	for _, spec := range []string{"none", "lz4", "s2", "zstd", "auto"} {
		sp, err := compress.ParseSpec(spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Run(spec, func(t *testing.T) { testBuilderAllocs(t, sp) })
	}
}

func testBuilderAllocs(t *testing.T, sp compress.Spec) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	const perRun = 2000
	if err := gen.WriteFile(path, gen.FileConfig{Count: 40 * perRun, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f, nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{Collectors: []string{"127.0.0.1:1"}, Insecure: true, ReadFile: path,
		BatchBytes: 64 << 10, QueueBytes: 1 << 30, Compress: sp, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a.closeSources()
	bd := a.newBuilder(true)
	var p pcapfile.Packet
	allocs := testing.AllocsPerRun(30, func() {
		for range perRun {
			if err := r.ReadInto(&p); err != nil {
				t.Fatal(err)
			}
			bd.add(p.Timestamp, 0, p.OrigLen, p.Data, 0)
		}
		a.q.ack(a.q.stats().lastSeq)
	})
	if a.q.stats().lastSeq < 30 {
		t.Fatalf("only %d batches sealed: the test does not exercise sealing", a.q.stats().lastSeq)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per %d packets, want 0", allocs, perRun)
	}
	if raw, sent := a.rawBytes.Load(), a.wireBytes.Load(); sp.Codec != compress.None && sent >= raw {
		t.Errorf("%s: %d bytes sent for %d: nothing was compressed", sp, sent, raw)
	}
}

// TestPipelineAllocsPerPacket replays files of two sizes through the
// real agent and an in-process collector over loopback TCP and
// compares the allocations of the whole process: what the larger run
// allocates more, per additional packet, is the steady-state cost per
// packet of agent and collector together (connection set-up, files and
// goroutines cost the same in both runs). Batches are small (64 KiB,
// about 180 IMIX packets) so that per-batch allocations would show too,
// and the queue is small (1 MiB) so that its pool of batch buffers,
// which grows to what the queue holds, is full early in both runs.
func TestPipelineAllocsPerPacket(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocation counts mean nothing under the race detector (scripts/test.sh runs this test without it)")
	}
	var acks ackCounter // the metrics' histogram costs nothing either
	perPacket := pipelineAllocsPerPacket(t, func() func(path string, n uint64) {
		rc := startCollector(t, collector.Config{Insecure: true})
		return func(path string, n uint64) {
			a, err := New(Config{Collectors: []string{rc.addr}, Name: "allocs", ReadFile: path, Insecure: true, AckLatency: &acks,
				BatchBytes: 64 << 10, QueueBytes: 1 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			s, err := a.Run(context.Background())
			if err != nil || s.Acked != n {
				t.Fatalf("replay of %d packets: %+v, %v", n, s, err)
			}
		}
	})
	// A single allocation per batch would be 1/180 = 0.0056 per packet.
	if perPacket > 0.002 {
		t.Errorf("%.4f allocations per packet in the steady state, want about 0", perPacket)
	}
	if acks.n.Load() == 0 {
		t.Error("no acknowledgement latency observed")
	}
}

// ackCounter counts observations.
type ackCounter struct{ n atomic.Int64 }

func (c *ackCounter) Observe(float64) { c.n.Add(1) }

// pipelineAllocsPerPacket replays generated IMIX files of two sizes,
// each with the replay that start returns (start runs a collector, not
// measured), and returns the allocations per additional packet.
func pipelineAllocsPerPacket(t *testing.T, start func() (replay func(path string, n uint64))) float64 {
	t.Helper()
	const small, large = 10_000, 60_000
	run := func(n uint64) float64 {
		path := filepath.Join(t.TempDir(), "in.pcap")
		if err := gen.WriteFile(path, gen.FileConfig{Count: n, Mix: gen.MixIMIX}); err != nil {
			t.Fatal(err)
		}
		replay := start()
		return testing.AllocsPerRun(1, func() { replay(path, n) })
	}
	runtime.GC()
	base := run(small)
	more := run(large)
	perPacket := (more - base) / (large - small)
	t.Logf("allocations: %v for %d packets, %v for %d: %.4f per additional packet", base, small, more, large, perPacket)
	return perPacket
}

// TestEarlyAckDoesNotRecycleABufferInUse replays many small batches,
// raw and compressed, through a real collector. The collector
// acknowledges a batch as soon as it has read it, often before the
// agent's Write returned; the batch's buffer must not go back to the
// pool (and be refilled by a source) until then (queue.beginWrite). The
// race detector once reported exactly that in an e2e replay from a FIFO
// with --compress s2 --batch-size 16K; this test did not reproduce it
// before the fix (the reuse must hit the very buffer being written), so
// it is a check that small batches all arrive, under -race, rather than
// a proof of the fix.
func TestEarlyAckDoesNotRecycleABufferInUse(t *testing.T) {
	rc := startCollector(t, collector.Config{Insecure: true})
	for _, spec := range []string{"none", "s2"} {
		sp, _ := compress.ParseSpec(spec)
		s, err, _ := replay(t, Config{Collectors: []string{rc.addr}, Name: "early-" + spec, Insecure: true,
			BatchBytes: 16 << 10, QueueBytes: 1 << 20, Compress: sp}, 20_000)
		if err != nil || s.Acked != 20_000 {
			t.Fatalf("%s: %+v, %v", spec, s, err)
		}
	}
	if n := rc.core.Counters.MissingBatches.Load(); n != 0 {
		t.Fatalf("collector saw %d batches missing from the sequence", n)
	}
}
