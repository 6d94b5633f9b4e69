package redisfeed

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkPublish: batches of 256 packets (about 100 KB, half of each
// packet random bytes) through the feed into a real Redis as fast as it
// publishes them (the caller waits while the queue is half full, which
// the collector never does): the feed's throughput per codec. ns/op is
// per batch; batch-ns is what the Batch call itself cost the caller.
func BenchmarkPublish(b *testing.B) {
	srv := redistest.Start(b)
	batch := mixedBatch(b, 256)
	for _, codec := range []string{"none", "s2", "zstd"} {
		b.Run(codec, func(b *testing.B) {
			f := newFeed(b, Config{URL: srv.URL(), Compress: mustSpec(b, codec), MaxLen: 1000})
			ev := collector.BatchEvent{Agent: "bench-" + codec, Host: "h", Ifaces: testIfaces, Batch: batch}
			b.SetBytes(int64(len(batch.Records)))
			b.ReportAllocs()
			var inBatch time.Duration
			for b.Loop() {
				for f.queued.Load() > f.cfg.QueueBytes/2 {
					runtime.Gosched()
				}
				start := time.Now()
				f.Batch(&ev)
				inBatch += time.Since(start)
			}
			f.Close(context.Background())
			b.ReportMetric(float64(inBatch)/float64(b.N), "batch-ns")
			b.ReportMetric(float64(f.Counters.Dropped.Load()), "dropped")
			b.ReportMetric(float64(f.Counters.SentBytes.Load())/float64(max(f.Counters.RawBytes.Load(), 1)), "ratio")
		})
	}
}

// mixedBatch is n packets of 64..1500 bytes whose first half repeats
// (headers) and second half is random (encrypted payload).
func mixedBatch(tb testing.TB, n int) *wire.Batch {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 1))
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		data := make([]byte, []int{64, 576, 1500}[i%3])
		for j := range data {
			if j < len(data)/2 {
				data[j] = byte(j)
			} else {
				data[j] = byte(rng.Uint32())
			}
		}
		e.Append(1767225600_000000000+int64(i)*4000, uint32(i%2), uint32(len(data)), data)
	}
	frame := e.Finish(1)
	b, err := wire.ParseBatch(frame[3], frame[wire.HeaderSize:], wire.BatchLimits{})
	if err != nil {
		tb.Fatal(err)
	}
	return &b
}
