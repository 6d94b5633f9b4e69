package kafkaio

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkCheck measures what a writer spends on a record before
// writing it: the checksum of its batch, and with a record key its MAC.
func BenchmarkCheck(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		a := newTestAgent("web1", 1)
		var e wire.BatchEncoder
		e.Reset(nil)
		pkt := make([]byte, 1500)
		for e.Len() < size {
			e.Append(1, 0, 1500, pkt)
		}
		rec := kafkarec.NewRecord("t", a.name, a.hello, nil, e.Finish(1))
		key, _ := kafkarec.NewRecordKey([]byte("0123456789abcdef0123456789abcdef"))
		signed := *rec
		signed.Headers = append([]kgo.RecordHeader(nil), rec.Headers...)
		key.Sign(&signed)
		for _, tc := range []struct {
			name string
			w    *Writer
			r    *kgo.Record
		}{
			{"checksum", &Writer{}, rec},
			{"checksum+mac", &Writer{cfg: WriterConfig{Key: key}}, &signed},
		} {
			b.Run(tc.name+"/"+sizeName(size), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(tc.r.Value)))
				for b.Loop() {
					if _, _, err := tc.w.check(tc.r); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func sizeName(n int) string {
	if n >= 1<<20 {
		return "1MiB"
	}
	return "64KiB"
}
