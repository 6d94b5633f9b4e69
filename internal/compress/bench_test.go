package compress

import (
	"testing"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkCompress compresses 256 KiB records sections: packet-like
// bytes and random (incompressible, like TLS) bytes, with every codec.
// The auto rows against the s2 rows are issue 5's goal: auto costs no
// more than s2 on incompressible traffic.
func BenchmarkCompress(b *testing.B) {
	s := samples()
	inputs := map[string][]byte{"packets": s["packets"], "random": s["random"]}
	for _, in := range []string{"packets", "random"} {
		src := inputs[in]
		for _, sp := range specs {
			b.Run(in+"/"+sp.String(), func(b *testing.B) {
				e, _ := NewEncoder(sp)
				buf := make([]byte, 0, MaxEncodedLen(len(src)))
				b.SetBytes(int64(len(src)))
				b.ReportAllocs()
				var in, out int
				for b.Loop() {
					o, codec := e.Compress(buf[:0], src)
					in += len(src)
					if out += len(o); codec == wire.CodecNone {
						out += len(src)
					}
				}
				b.ReportMetric(float64(out)/float64(in), "out/in")
			})
		}
	}
}

// BenchmarkDecompress decompresses the packet-like sample.
func BenchmarkDecompress(b *testing.B) {
	src := samples()["packets"]
	d, _ := NewDecoder(4<<20, 1)
	defer d.Close()
	for _, sp := range specs[:3] {
		e, _ := NewEncoder(sp)
		comp, codec := e.Compress(nil, src)
		if codec == wire.CodecNone {
			b.Fatalf("%s did not compress", sp)
		}
		b.Run(sp.String(), func(b *testing.B) {
			out := make([]byte, 0, len(src))
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			for b.Loop() {
				out, _ = d.Decompress(out, codec, comp, len(src))
			}
		})
	}
}
