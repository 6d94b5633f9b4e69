package wirecompare

import (
	"bytes"
	"strconv"
	"sync"
	"testing"
)

// CompressBatches are the record counts of the compressed batches: a
// busy agent's batch, and a small one (a quiet link's 50 ms flush),
// where a dictionary should matter most.
var CompressBatches = []int{1000, 32}

var compressors = struct {
	sync.Mutex
	m map[Traffic][]Compressor
}{m: map[Traffic][]Compressor{}}

// compressorsFor returns the compressors with a dictionary trained on
// traffic t, made once per test binary (training takes a while).
func compressorsFor(tb testing.TB, t Traffic) []Compressor {
	tb.Helper()
	compressors.Lock()
	defer compressors.Unlock()
	if cs, ok := compressors.m[t]; ok {
		return cs
	}
	samples, err := DictSamples(t, 4000)
	if err != nil {
		tb.Fatal(err)
	}
	cs, err := Compressors(samples)
	if err != nil {
		tb.Fatal(err)
	}
	compressors.m[t] = cs
	return cs
}

func TestCompressRoundTrip(t *testing.T) {
	for _, tr := range Traffics {
		for _, n := range CompressBatches {
			b, err := Generate(tr, n, 1)
			if err != nil {
				t.Fatal(err)
			}
			raw := RecordsSection(&b)
			for _, c := range compressorsFor(t, tr) {
				z, err := c.Compress(nil, raw)
				if err != nil {
					t.Fatalf("%s %d %s: %v", tr, n, c.Name(), err)
				}
				got, err := c.Decompress(nil, z, len(raw))
				if err != nil || !bytes.Equal(got, raw) {
					t.Errorf("%s %d %s: round trip differs (err %v)", tr, n, c.Name(), err)
				}
				t.Logf("%s/%d/%s: %d -> %d bytes (%.3f)", tr, n, c.Name(), len(raw), len(z), float64(len(z))/float64(len(raw)))
			}
		}
	}
}

// BenchmarkCompress runs every compressor on a batch of every traffic
// kind, named traffic/records/compressor/{compress,decompress}. MB/s
// counts uncompressed bytes; ratio is compressed / uncompressed size.
func BenchmarkCompress(b *testing.B) {
	for _, tr := range Traffics {
		for _, n := range CompressBatches {
			b.Run(string(tr)+"/"+strconv.Itoa(n), func(b *testing.B) {
				batch, err := Generate(tr, n, 1)
				if err != nil {
					b.Fatal(err)
				}
				raw := RecordsSection(&batch)
				for _, c := range compressorsFor(b, tr) {
					b.Run(c.Name(), func(b *testing.B) { benchCompressor(b, c, raw) })
				}
			})
		}
	}
}

func benchCompressor(b *testing.B, c Compressor, raw []byte) {
	z, err := c.Compress(nil, raw)
	if err != nil {
		b.Fatal(err)
	}
	ratio := float64(len(z)) / float64(len(raw))
	b.Run("compress", func(b *testing.B) {
		buf := make([]byte, 0, 2*len(raw)+1024)
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if buf, err = c.Compress(buf, raw); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(ratio, "ratio")
	})
	b.Run("decompress", func(b *testing.B) {
		buf := make([]byte, 0, len(raw))
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if buf, err = c.Decompress(buf, z, len(raw)); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(ratio, "ratio")
	})
}
