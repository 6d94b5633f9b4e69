package pcapflate

import (
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/pcapsync/pcapsync/internal/testutil/ngstream"
)

type counter int64

func (c *counter) Write(p []byte) (int, error) { *c += counter(len(p)); return len(p), nil }

// BenchmarkEncode compresses 64 MiB of IMIX pcapng with random payloads
// from 100 flows, in members of 1 MiB written in one piece as the
// store's compressor writes them (a member per commit, at a block's
// end), with this
// package and with the library's level 1 and Huffman-only coding, side
// by side.
func BenchmarkEncode(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var in []byte
	for len(in) < 64<<20 {
		in = append(in, ngstream.Stream{Flows: 100}.Gen(r, 20000)...)
	}
	// Members of about 1 MiB that end at a pcapng block's end, as the
	// store's commits end them.
	var cuts []int
	for pos, last := 0, 0; pos < len(in); {
		pos += int(binary.LittleEndian.Uint32(in[pos+4:]))
		if pos-last >= 1<<20 || pos >= len(in) {
			cuts, last = append(cuts, pos), pos
		}
	}
	run := func(b *testing.B, w interface {
		io.WriteCloser
		Reset(io.Writer)
	}) {
		var c counter
		b.SetBytes(int64(len(in)))
		for b.Loop() {
			c = 0
			from := 0
			for _, to := range cuts {
				w.Reset(&c)
				w.Write(in[from:to])
				w.Close()
				from = to
			}
		}
		b.ReportMetric(float64(c)/float64(len(in)), "ratio")
	}
	b.Run("pcapflate", func(b *testing.B) { run(b, NewEncoder(nil)) })
	b.Run("level1", func(b *testing.B) {
		w, _ := kgzip.NewWriterLevel(nil, kgzip.BestSpeed)
		run(b, w)
	})
	b.Run("huffman", func(b *testing.B) {
		w, _ := kgzip.NewWriterLevel(nil, kgzip.HuffmanOnly)
		run(b, w)
	})
}
