package wirecompare

import (
	"errors"
	"hash/crc32"
	"testing"
)

// BenchmarkCodec runs every operation of every codec on every workload,
// named workload/codec/op. ns/op, B/op and allocs/op are per batch (a
// batch of one record for the fixed sizes); MB/s counts packet data.
// The encode ops also report the encoded size per record (B/rec) and
// what it spends beyond the packet data (overhead-B/rec).
func BenchmarkCodec(b *testing.B) {
	for _, w := range Workloads() {
		b.Run(w.Name, func(b *testing.B) {
			for _, c := range Codecs() {
				b.Run(c.Name(), func(b *testing.B) { benchCodec(b, c, &w.Batch) })
			}
		})
	}
}

func benchCodec(b *testing.B, c Codec, batch *Batch) {
	c.Load(batch)
	enc, err := c.Encode()
	if err != nil {
		b.Fatal(err)
	}
	data := batch.DataBytes()
	n := float64(len(batch.Records))
	sizes := func(b *testing.B) {
		b.ReportMetric(float64(len(enc))/n, "B/rec")
		b.ReportMetric(float64(len(enc)-data)/n, "overhead-B/rec")
	}
	run := func(name string, op func() error) {
		b.Run(name, func(b *testing.B) {
			if err := op(); errors.Is(err, ErrUnsupported) {
				b.Skip(err)
			} else if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(data))
			b.ReportAllocs()
			for b.Loop() {
				if err := op(); err != nil {
					b.Fatal(err)
				}
			}
			if name == "encode" {
				sizes(b)
			}
		})
	}
	var buf []byte
	var w discard
	run("encode", func() error { _, err := c.Encode(); return err })
	run("encode-reuse", func() error { buf, err = c.AppendEncode(buf); return err })
	run("encode-writer", func() error { return c.EncodeTo(w) })
	run("decode", func() error { _, err := c.Decode(enc); return err })
	run("decode-meta", func() error { _, err := c.DecodeMeta(enc); return err })
	run("decode-pooled", func() error { _, err := c.DecodePooled(enc); return err })
	run("decode-view", func() error { _, err := c.DecodeView(enc); return err })
}

// BenchmarkChecksum is CRC-32C (Castagnoli) over the realistic batch's
// records section: the part of the wire format's encode and decode
// times that the other codecs do not do (they have no checksum).
func BenchmarkChecksum(b *testing.B) {
	w := Workloads()[len(FixedSizes)]
	p := RecordsSection(&w.Batch)
	tab := crc32.MakeTable(crc32.Castagnoli)
	b.Run(w.Name+"/crc32c", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		b.ReportAllocs()
		var sum uint32
		for b.Loop() {
			sum += crc32.Checksum(p, tab)
		}
		_ = sum
	})
}

// BenchmarkCopyFloor copies the realistic batch's packet data, record by
// record, into a reused buffer and does nothing else: the least any
// encoder that writes the packets into one buffer (and any decoder
// that copies them out) must spend.
func BenchmarkCopyFloor(b *testing.B) {
	w := Workloads()[len(FixedSizes)]
	buf := make([]byte, 0, w.Batch.DataBytes())
	b.Run(w.Name+"/copy", func(b *testing.B) {
		b.SetBytes(int64(w.Batch.DataBytes()))
		b.ReportAllocs()
		for b.Loop() {
			buf = buf[:0]
			for i := range w.Batch.Records {
				buf = append(buf, w.Batch.Records[i].Data...)
			}
		}
	})
}
