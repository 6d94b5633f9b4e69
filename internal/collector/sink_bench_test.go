package collector

import (
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkIngestCheck measures what an ingest collector spends on
// each 1 MiB batch before handing it to Kafka: "frame" is what it does
// (parse, checksum, declared sizes), "decompress" what it did before
// issue 26 (the same, then decompress and validate every record: work
// the writer does again on the batch's way to the file).
func BenchmarkIngestCheck(b *testing.B) {
	c, err := NewCore(Config{Sink: &instantSink{}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	var e wire.BatchEncoder
	e.Reset(nil)
	pkt := make([]byte, 1514)
	for i := 0; e.Len() < 1<<20; i++ {
		n := 60 + rng.IntN(1454)
		for j := range n { // headers repeat, payloads are text-like: about 2-3x with zstd
			if j < 54 {
				pkt[j] = byte(j)
			} else {
				pkt[j] = "abcdefghij klmnop\n"[rng.IntN(18)]
			}
		}
		e.Append(int64(1_700_000_000_000_000_000+i*1000), 0, uint32(n), pkt[:n])
	}
	for _, sp := range []compress.Spec{{Codec: compress.LZ4}, {Codec: compress.S2}, {Codec: compress.Zstd}} {
		enc, err := compress.NewEncoder(sp)
		if err != nil {
			b.Fatal(err)
		}
		frame, codec := enc.Compress(wire.CompressedFrame(nil), e.Records())
		p := e.FinishCompressed(frame, 1, codec)[wire.HeaderSize:]
		for _, mode := range []string{"frame", "decompress"} {
			b.Run(sp.String()+"/"+mode, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(e.Records())))
				for b.Loop() {
					bt, err := wire.ParseBatch(uint8(codec), p, wire.BatchLimits{})
					if err != nil {
						b.Fatal(err)
					}
					if mode == "frame" {
						continue
					}
					buf, err := c.decompress(&bt)
					if err != nil {
						b.Fatal(err)
					}
					if err := bt.Validate(1); err != nil {
						b.Fatal(err)
					}
					c.bufs.Put(buf)
				}
			})
		}
	}
}
