package pcapzstd

import (
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

// benchInput is 64 MiB of pcapng: IMIX packets with random payloads
// from 100 flows.
func benchInput() []byte {
	r := rand.New(rand.NewPCG(5, 6))
	var in []byte
	for len(in) < 64<<20 {
		in = append(in, ngstream.Stream{Flows: 100}.Gen(r, 20000)...)
	}
	return in
}

type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

// coder is what the benchmarks drive: this package's Encoder or the
// library's.
type coder interface {
	io.WriteCloser
	Reset(io.Writer)
	Flush() error
}

// encodeAll benchmarks w on in, written in pieces of 1 MiB as a store's
// compressor writes them (each flushed, with flush), and reports the
// output's size over the input's.
func encodeAll(b *testing.B, w coder, in []byte, flush bool) {
	var c counter
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		c = 0
		w.Reset(&c)
		for i := 0; i < len(in); i += 1 << 20 {
			w.Write(in[i:min(i+1<<20, len(in))])
			if flush {
				w.Flush()
			}
		}
		w.Close()
	}
	b.ReportMetric(float64(c)/float64(len(in)), "ratio")
}

// BenchmarkEncode compresses the input with this package and with the
// library's fastest level without entropy coding (the files' encoder
// for such streams before this package), side by side.
func BenchmarkEncode(b *testing.B) {
	in := benchInput()
	b.Run("pcapzstd", func(b *testing.B) { encodeAll(b, NewEncoder(nil), in, false) })
	b.Run("zstd-1-noentropy", func(b *testing.B) {
		z, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1),
			zstd.WithEncoderCRC(false), zstd.WithWindowSize(Window), zstd.WithNoEntropyCompression(true))
		encodeAll(b, z, in, false)
	})
}

// BenchmarkEncodeFile is BenchmarkEncode's pcapzstd on the first 128
// MiB of the pcapng file PCAPZSTD_BENCH_FILE names (for instance a
// collector's output of `pcapsync bench pipeline --keep DIR`), each
// MiB flushed; skipped without it.
func BenchmarkEncodeFile(b *testing.B) {
	path := os.Getenv("PCAPZSTD_BENCH_FILE")
	if path == "" {
		b.Skip("PCAPZSTD_BENCH_FILE not set")
	}
	in, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	encodeAll(b, NewEncoder(nil), in[:min(len(in), 128<<20)], true)
}
