package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"testing"
	"unsafe"

	"github.com/pcapsync/pcapsync/internal/raceflag"
)

func testRecords(n int, rng *rand.Rand) []Record {
	recs := make([]Record, n)
	ts := int64(1_700_000_000_123_456_789)
	for i := range recs {
		size := []int{0, 1, 60, 576, 1500, 9000, 65535}[rng.IntN(7)]
		data := make([]byte, size)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		ts += int64(rng.IntN(2_000_000)) - 500_000 // not monotonic
		orig := uint32(size)
		if rng.IntN(4) == 0 {
			orig += uint32(rng.IntN(70000))
		}
		recs[i] = Record{Timestamp: ts, IfIndex: uint32(rng.IntN(3)), OrigLen: orig, Data: data}
	}
	return recs
}

func encode(recs []Record, seq uint64) []byte {
	var e BatchEncoder
	e.Reset(nil)
	for _, r := range recs {
		e.Append(r.Timestamp, r.IfIndex, r.OrigLen, r.Data)
	}
	return e.Finish(seq)
}

func decodeFrame(t testing.TB, frame []byte, nIf uint32) (Batch, []Record, error) {
	t.Helper()
	fr := NewFrameReader(bytes.NewReader(frame), Limits{})
	h, p, err := fr.Next()
	if err != nil {
		return Batch{}, nil, err
	}
	if h.Type != TypeBatch {
		t.Fatalf("type %s, want batch", h.Type)
	}
	b, err := ParseBatch(h.Flags, p, BatchLimits{})
	if err != nil {
		return b, nil, err
	}
	if err := b.Validate(nIf); err != nil {
		return b, nil, err
	}
	var out []Record
	it := b.Iter(nIf)
	for {
		var r Record
		if err := it.Next(&r); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("Next after Validate: %v", err)
		}
		out = append(out, r)
	}
	return b, out, nil
}

func TestBatchRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 100, 1000} {
		recs := testRecords(n, rng)
		frame := encode(recs, 42)
		b, got, err := decodeFrame(t, frame, 3)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if b.Seq != 42 || int(b.Count) != n {
			t.Fatalf("n=%d: seq %d count %d", n, b.Seq, b.Count)
		}
		if len(got) != n {
			t.Fatalf("n=%d: decoded %d records", n, len(got))
		}
		for i := range recs {
			w, g := recs[i], got[i]
			if w.Timestamp != g.Timestamp || w.IfIndex != g.IfIndex || w.OrigLen != g.OrigLen || !bytes.Equal(w.Data, g.Data) {
				t.Fatalf("n=%d record %d: got %+v want %+v", n, i, g, w)
			}
			if cap(g.Data) != len(g.Data) {
				t.Fatalf("record %d: data not capped", i)
			}
		}
	}
}

func TestBatchExtremeTimestamps(t *testing.T) {
	recs := []Record{
		{Timestamp: math.MaxInt64, Data: []byte{1}},
		{Timestamp: math.MinInt64, Data: []byte{2}},
		{Timestamp: 0},
		{Timestamp: -1, OrigLen: math.MaxUint32, Data: []byte{3, 4}},
	}
	for i := range recs {
		if recs[i].OrigLen < uint32(len(recs[i].Data)) {
			recs[i].OrigLen = uint32(len(recs[i].Data))
		}
	}
	_, got, err := decodeFrame(t, encode(recs, 1), 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		if got[i].Timestamp != recs[i].Timestamp || got[i].OrigLen != recs[i].OrigLen {
			t.Errorf("record %d: got ts %d orig %d, want %d %d", i, got[i].Timestamp, got[i].OrigLen, recs[i].Timestamp, recs[i].OrigLen)
		}
	}
}

// TestRecordOverhead pins the per-record metadata cost on live-like
// traffic: packets microseconds apart on one interface.
func TestRecordOverhead(t *testing.T) {
	var e BatchEncoder
	e.Reset(nil)
	data := make([]byte, 600)
	ts := int64(1_700_000_000_000_000_000)
	const n = 1000
	for i := range n {
		ts += 3_000 + int64(i%7)*1000
		e.Append(ts, 0, 600, data)
	}
	per := float64(e.Len()-HeaderSize-BatchHeaderSize-n*len(data)) / n
	if per > 7 {
		t.Fatalf("%.2f bytes of metadata per record, want <= 7 (the fixed layout we replace spends 22)", per)
	}
	t.Logf("%.2f bytes of metadata per record (+%.3f for the headers)", per, float64(HeaderSize+BatchHeaderSize)/n)
}

func TestBatchMalformed(t *testing.T) {
	good := encode([]Record{{Timestamp: 5, Data: []byte("abc")}, {Timestamp: 9, IfIndex: 1, Data: []byte("de")}}, 7)
	payload := func(f []byte) []byte { return f[HeaderSize:] }
	// reseal recomputes the CRC so a structural fault is what is tested.
	reseal := func(p []byte) []byte {
		crc := batchCRC(p)
		binary.LittleEndian.PutUint32(p[24:], crc)
		return p
	}
	mut := func(f func(p []byte) []byte) []byte {
		p := append([]byte(nil), payload(good)...)
		return f(p)
	}
	tests := []struct {
		name  string
		flags uint8
		p     []byte
		nIf   uint32
		want  error
		lim   BatchLimits
	}{
		{"short header", 0, payload(good)[:27], 2, ErrTruncated, BatchLimits{}},
		{"bad crc", 0, mut(func(p []byte) []byte { p[len(p)-1] ^= 1; return p }), 2, ErrChecksum, BatchLimits{}},
		{"unknown codec", 4, payload(good), 2, ErrFlags, BatchLimits{}},
		{"reserved flag bit", 0x20, payload(good), 2, ErrFlags, BatchLimits{Unchecked: true}},
		{"unchecked not accepted", FlagUnchecked, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[24:], 0); return p }), 2, ErrUnchecked, BatchLimits{}},
		{"unchecked with a crc", FlagUnchecked, payload(good), 2, ErrMalformed, BatchLimits{Unchecked: true}},
		{"rawlen", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[20:], 99); return reseal(p) }), 2, ErrMalformed, BatchLimits{}},
		{"count too big for bytes", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[16:], 1000); return reseal(p) }), 2, ErrMalformed, BatchLimits{}},
		{"count over limit", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[16:], 1<<21); return reseal(p) }), 2, ErrTooLarge, BatchLimits{}},
		{"count one more", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[16:], 3); return reseal(p) }), 2, ErrTruncated, BatchLimits{}},
		{"count one less", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[16:], 1); return reseal(p) }), 2, ErrMalformed, BatchLimits{}},
		{"iface out of range", 0, payload(good), 1, ErrMalformed, BatchLimits{}},
		// The records section: data "abc" "de", metadata 00 03 and
		// 41 08 02 01 00, trailer 5.
		{"caplen beyond end", 0, mut(func(p []byte) []byte { p[BatchHeaderSize+5+1] = 100; return reseal(p) }), 2, ErrTruncated, BatchLimits{}},
		{"data left over", 0, mut(func(p []byte) []byte { p[BatchHeaderSize+5+4] = 1; return reseal(p) }), 2, ErrMalformed, BatchLimits{}},
		{"trailer beyond section", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[len(p)-4:], 14); return reseal(p) }), 2, ErrMalformed, BatchLimits{}},
		{"trailer cuts metadata", 0, mut(func(p []byte) []byte { binary.LittleEndian.PutUint32(p[len(p)-4:], 7); return reseal(p) }), 2, ErrTruncated, BatchLimits{}},
		{"timestamp delta over 8 bytes", 0, mut(func(p []byte) []byte {
			p = append(p[:BatchHeaderSize], bytes.Repeat([]byte{0xff}, 11)...)
			p = append(p, 0, 0, 0, 0)
			binary.LittleEndian.PutUint32(p[16:], 1)
			binary.LittleEndian.PutUint32(p[20:], 15)
			return reseal(p)
		}), 2, ErrMalformed, BatchLimits{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseBatch(tt.flags, tt.p, tt.lim)
			if err == nil {
				var recs []Record
				recs, err = b.Decode(tt.nIf, nil)
				if verr := b.Validate(tt.nIf); (verr == nil) != (err == nil) || len(recs) != 0 {
					t.Fatalf("Decode: %v, %d records; Validate: %v", err, len(recs), verr)
				}
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestEncodeDecodeAllocs(t *testing.T) {
	recs := testRecords(200, rand.New(rand.NewPCG(3, 4)))
	buf := make([]byte, 0, 8<<20)
	var e BatchEncoder
	var frame []byte
	enc := testing.AllocsPerRun(20, func() {
		e.Reset(buf)
		for i := range recs {
			e.Append(recs[i].Timestamp, recs[i].IfIndex, recs[i].OrigLen, recs[i].Data)
		}
		frame = e.Finish(1)
	})
	if enc != 0 {
		t.Errorf("encode: %v allocs per batch, want 0", enc)
	}
	var r Record
	dec := testing.AllocsPerRun(20, func() {
		b, err := ParseBatch(0, frame[HeaderSize:], BatchLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Validate(3); err != nil {
			t.Fatal(err)
		}
		it := b.Iter(3)
		for it.Next(&r) == nil {
		}
	})
	if dec != 0 {
		t.Errorf("decode: %v allocs per batch, want 0", dec)
	}
	kept := make([]Record, 0, len(recs))
	dec = testing.AllocsPerRun(20, func() {
		b, err := ParseBatch(0, frame[HeaderSize:], BatchLimits{})
		if err != nil {
			t.Fatal(err)
		}
		if kept, err = b.Decode(3, kept); err != nil || len(kept) != len(recs) {
			t.Fatal(err, len(kept))
		}
	})
	if dec != 0 {
		t.Errorf("Decode into room for the batch: %v allocs per batch, want 0", dec)
	}
	if raceflag.Enabled {
		return // the race detector makes sync.Pool drop buffers on purpose
	}
	fr := NewFrameReader(&loopReader{b: frame}, Limits{})
	fr.Next() // first call fills the pool
	rd := testing.AllocsPerRun(20, func() {
		if _, _, err := fr.Next(); err != nil {
			t.Fatal(err)
		}
	})
	if rd != 0 {
		t.Errorf("frame reader: %v allocs per frame, want 0", rd)
	}
}

// loopReader yields b over and over.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

func FuzzBatch(f *testing.F) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, n := range []int{0, 1, 3} {
		recs := testRecords(n, rng)
		for i := range recs {
			recs[i].Data = recs[i].Data[:min(len(recs[i].Data), 100)]
		}
		p := encode(recs, 9)[HeaderSize:]
		f.Add(uint8(0), p)
		f.Add(uint8(0), p[:len(p)/2])
		f.Add(uint8(0), append(append([]byte(nil), p...), 0, 1, 2))
		// Unchecked: no CRC for mutations to break, so the fuzzer
		// reaches the records parser with every change it makes.
		var e BatchEncoder
		e.Unchecked = true
		e.Reset(nil)
		for _, r := range recs {
			e.Append(r.Timestamp, r.IfIndex, r.OrigLen, r.Data)
		}
		f.Add(FlagUnchecked, e.Finish(9)[HeaderSize:])
	}
	f.Add(uint8(0), []byte{})
	f.Fuzz(func(t *testing.T, flags uint8, p []byte) {
		b, err := ParseBatch(flags, p, BatchLimits{MaxRecords: 4096, Unchecked: true})
		if err != nil || b.Codec != CodecNone {
			return // compressed records: internal/compress fuzzes those
		}
		if b.Count > 4096 || uint64(b.Count)*minRecord > uint64(len(b.Records)) {
			t.Fatalf("accepted count %d for %d bytes", b.Count, len(b.Records))
		}
		verr := b.Validate(4)
		drecs, derr := b.Decode(4, nil)
		if (derr == nil) != (verr == nil) || derr != nil && derr.Error() != verr.Error() {
			t.Fatalf("Validate: %v; Decode: %v", verr, derr)
		}
		var recs []Record
		it := b.Iter(4)
		total := 0
		for {
			var r Record
			err := it.Next(&r)
			if err == io.EOF {
				break
			}
			if err != nil {
				if verr == nil {
					t.Fatalf("Validate passed, Next failed: %v", err)
				}
				return
			}
			if r.IfIndex >= 4 || r.OrigLen < uint32(len(r.Data)) || cap(r.Data) != len(r.Data) {
				t.Fatalf("record breaks invariants: %+v", r)
			}
			total += len(r.Data)
			recs = append(recs, r)
		}
		if verr != nil {
			t.Fatalf("Validate failed (%v) but iteration succeeded", verr)
		}
		if len(recs) != int(b.Count) || total > len(b.Records) {
			t.Fatalf("%d records of %d bytes from count %d, %d bytes", len(recs), total, b.Count, len(b.Records))
		}
		if len(drecs) != len(recs) {
			t.Fatalf("Decode: %d records, iteration %d", len(drecs), len(recs))
		}
		for i := range recs {
			if drecs[i].Timestamp != recs[i].Timestamp || drecs[i].IfIndex != recs[i].IfIndex || drecs[i].OrigLen != recs[i].OrigLen ||
				unsafe.SliceData(drecs[i].Data) != unsafe.SliceData(recs[i].Data) || len(drecs[i].Data) != len(recs[i].Data) {
				t.Fatalf("Decode: record %d differs from iteration's", i)
			}
		}
		// Round trip: re-encoding yields the same records.
		again, got, err := decodeFrame(t, encode(recs, b.Seq), 4)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if again.Seq != b.Seq || len(got) != len(recs) {
			t.Fatalf("round trip: seq %d/%d, %d/%d records", again.Seq, b.Seq, len(got), len(recs))
		}
		for i := range recs {
			if got[i].Timestamp != recs[i].Timestamp || got[i].OrigLen != recs[i].OrigLen || !bytes.Equal(got[i].Data, recs[i].Data) {
				t.Fatalf("round trip record %d differs", i)
			}
		}
	})
}

var sizes = []int{64, 576, 1500, 9000, 65535}

func BenchmarkEncode(b *testing.B) {
	for _, size := range sizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			data := make([]byte, size)
			buf := make([]byte, 0, 1<<20+size+RecordMaxOverhead+64)
			var e BatchEncoder
			e.Reset(buf)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			ts := int64(1_700_000_000_000_000_000)
			for i := 0; b.Loop(); i++ {
				if e.Len()+size+RecordMaxOverhead > 1<<20 {
					e.Finish(uint64(i))
					e.Reset(buf)
				}
				ts += 1500
				e.Append(ts, 0, uint32(size), data)
			}
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, size := range sizes {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			data := make([]byte, size)
			var e BatchEncoder
			e.Reset(nil)
			n := max(1, (1<<20)/(size+8))
			for i := range n {
				e.Append(int64(i)*1500, 0, uint32(size), data)
			}
			p := e.Finish(1)[HeaderSize:]
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var r Record
			var it RecordIter
			for b.Loop() {
				if err := it.Next(&r); err != nil {
					bt, _ := ParseBatch(0, p, BatchLimits{})
					it = bt.Iter(1)
				}
			}
		})
	}
}

// TestFinishFrame: a parsed batch re-framed as it is gives back the very
// frame, and re-framed with other records bytes and a codec it keeps its
// header fields and gets a checksum that ParseBatch accepts.
func TestFinishFrame(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 50} {
		frame := encode(testRecords(n, rng), 7)
		b, _, err := decodeFrame(t, frame, 3)
		if err != nil {
			t.Fatal(err)
		}
		got := b.FinishFrame(append(CompressedFrame(nil), b.Records...), CodecNone)
		if !bytes.Equal(got, frame) {
			t.Fatalf("n=%d: re-framed batch differs from the original", n)
		}
		packed := []byte("stands in for compressed records")
		got = b.FinishFrame(append(CompressedFrame(make([]byte, 5)), packed...), CodecS2)
		h, p, err := NewFrameReader(bytes.NewReader(got), Limits{}).Next()
		if err != nil {
			t.Fatal(err)
		}
		b2, err := ParseBatch(h.Flags, p, BatchLimits{})
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		if b2.Seq != b.Seq || b2.BaseTime != b.BaseTime || b2.Count != b.Count || b2.RawLen != b.RawLen ||
			b2.Codec != CodecS2 || !bytes.Equal(b2.Records, packed) {
			t.Fatalf("n=%d: got %+v, want the header of %+v with codec s2", n, b2, b)
		}
	}
}

// TestMeta: putMeta and getMeta round-trip every field at every length,
// from a full buffer and from the zero-padded copy the iterator reads
// at a buffer's end, and the tag gives the shortest encoding.
func TestMeta(t *testing.T) {
	var zzs []uint64
	for b := range 65 {
		zzs = append(zzs, 1<<b-1, 1<<b|1)
	}
	for _, zz := range zzs {
		for _, capLen := range []uint32{0, 1, 0xff, 0x100, 0xffff, 0x10000, 1<<24 - 1, 1 << 24, 1<<32 - 1} {
			for _, ifx := range []uint32{0, 1, MaxInterfaces - 1} {
				for _, extra := range []uint32{0, 1, 1<<32 - 1} {
					var h [metaRoom]byte
					n := putMeta(&h, zz, ifx, capLen, extra)
					want := 1 + (bits.Len64(zz)+7)/8 + max(1, (bits.Len32(capLen)+7)/8)
					if ifx != 0 {
						want += 2
					}
					if extra != 0 {
						want += 4
					}
					if n != want {
						t.Fatalf("putMeta(%#x, %d, %d, %d) = %d bytes, want %d", zz, ifx, capLen, extra, n, want)
					}
					var cut [RecordMaxOverhead]byte
					copy(cut[:], h[:n])
					for _, g := range []*[RecordMaxOverhead]byte{(*[RecordMaxOverhead]byte)(h[:RecordMaxOverhead]), &cut} {
						z2, i2, c2, e2, n2, ok := getMeta(g)
						if !ok || z2 != zz || i2 != ifx || c2 != capLen || e2 != extra || n2 != n {
							t.Fatalf("getMeta(putMeta(%#x, %d, %d, %d)) = %#x, %d, %d, %d, %d, %v", zz, ifx, capLen, extra, z2, i2, c2, e2, n2, ok)
						}
					}
				}
			}
		}
	}
	var bad [RecordMaxOverhead]byte
	bad[0] = 9 // a 9-byte timestamp delta
	if _, _, _, _, _, ok := getMeta(&bad); ok {
		t.Fatal("getMeta accepted a tag with a 9-byte timestamp delta")
	}
}

// TestBatchVerified: with BatchLimits.Verified the batch's checksum is
// not computed (the transport checked one over the same bytes), and
// every other check still applies.
func TestBatchVerified(t *testing.T) {
	good := encode([]Record{{Timestamp: 5, Data: []byte("abc")}, {Timestamp: 9, IfIndex: 1, Data: []byte("de")}}, 7)
	p := append([]byte(nil), good[HeaderSize:]...)
	p[24] ^= 0xff // the crc32c field no longer matches
	if _, err := ParseBatch(0, p, BatchLimits{}); !errors.Is(err, ErrChecksum) {
		t.Fatalf("unverified: err = %v, want ErrChecksum", err)
	}
	b, err := ParseBatch(0, p, BatchLimits{Verified: true})
	if err != nil {
		t.Fatalf("verified: %v", err)
	}
	if err := b.Validate(2); err != nil || b.Count != 2 {
		t.Fatalf("verified: count %d, %v", b.Count, err)
	}
	binary.LittleEndian.PutUint32(p[20:], 99) // a raw length the records do not have
	if _, err := ParseBatch(0, p, BatchLimits{Verified: true}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("verified, bad raw length: err = %v, want ErrMalformed", err)
	}
	if _, err := ParseBatch(FlagUnchecked, good[HeaderSize:], BatchLimits{Verified: true}); !errors.Is(err, ErrUnchecked) {
		t.Fatalf("verified, unchecked flag: err = %v, want ErrUnchecked", err)
	}
}
