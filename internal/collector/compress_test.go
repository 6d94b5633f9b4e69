package collector

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/s2"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// compressedPayload is batchPayload with its records compressed by sp.
func compressedPayload(t *testing.T, sp compress.Spec, seq uint64, first, n int) (uint8, []byte) {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		k := first + i
		e.Append(int64(1_700_000_000_000_000_000+k*1000), uint32(k%2), uint32(100+k%7), bytes.Repeat([]byte{byte(k)}, 60+k%40))
	}
	enc, err := compress.NewEncoder(sp)
	if err != nil {
		t.Fatal(err)
	}
	frame, codec := enc.Compress(wire.CompressedFrame(nil), e.Records())
	if codec != sp.Codec {
		t.Fatalf("%s did not compress the test batch", sp)
	}
	return uint8(codec), e.FinishCompressed(frame, seq, codec)[wire.HeaderSize:]
}

// TestCompressedBatches: batches of every codec, mixed with raw ones in
// one session, are written packet for packet as if sent raw, counted,
// and deduplicated before being decompressed.
func TestCompressedBatches(t *testing.T) {
	c := newCore(t, Config{})
	s, w, err := c.Begin(hello("z", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if w.Codecs != AcceptedCodecs {
		t.Fatalf("welcome offers codecs %b", w.Codecs)
	}
	specs := []compress.Spec{{Codec: wire.CodecLZ4}, {Codec: wire.CodecS2}, {Codec: wire.CodecZstd}, {Codec: wire.CodecZstd, Level: 19}}
	seq := uint64(0)
	for i, sp := range specs {
		seq++
		flags, p := compressedPayload(t, sp, seq, 20*i, 10)
		if dup, err := s.Batch(flags, p); dup || err != nil {
			t.Fatalf("%s: dup %v, %v", sp, dup, err)
		}
		seq++
		if dup, err := s.Batch(0, batchPayload(seq, 20*i+10, 10)); dup || err != nil {
			t.Fatalf("raw after %s: dup %v, %v", sp, dup, err)
		}
	}
	flags, p := compressedPayload(t, specs[0], 1, 0, 10)
	if dup, err := s.Batch(flags, p); !dup || err != nil {
		t.Fatalf("resent compressed batch 1: dup %v, %v", dup, err)
	}
	if got, err := s.Commit(); got != seq || err != nil {
		t.Fatalf("Commit = %d, %v", got, err)
	}
	s.End(true)
	pkts, _ := readDir(t, filepath.Join(c.dir, "z"))
	if len(pkts) != 80 {
		t.Fatalf("%d packets written, want 80", len(pkts))
	}
	for i, p := range pkts {
		if p.data[0] != byte(i) || len(p.data) != 60+i%40 || p.orig != uint32(100+i%7) || p.ts != int64(1_700_000_000_000_000_000+i*1000) {
			t.Fatalf("packet %d: %+v", i, p)
		}
	}
	if n := c.Counters.Compressed.Load(); n != 5 {
		t.Errorf("compressed batches counted %d, want 5 (4 + the duplicate)", n)
	}
	if w, r := c.Counters.WireBytes.Load(), c.Counters.RawBytes.Load(); w == 0 || r <= w {
		t.Errorf("wire bytes %d, raw bytes %d", w, r)
	}
}

// TestBadCompressedBatch: a bomb (records that decompress past the frame
// limit) and corrupt compressed records are refused with their reason,
// counted, and write nothing; the session's earlier batches stay.
func TestBadCompressedBatch(t *testing.T) {
	c := newCore(t, Config{MaxFrame: 64 << 10})
	s, _, err := c.Begin(hello("bomb", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(0, batchPayload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	// 1 MiB of zeros in a 60-byte s2 block, declared as such.
	var e wire.BatchEncoder
	e.Reset(nil)
	e.Append(1, 0, 1<<20, make([]byte, 1<<20))
	frame := append(wire.CompressedFrame(nil), s2.Encode(nil, e.Records())...)
	bomb := e.FinishCompressed(frame, 2, wire.CodecS2)[wire.HeaderSize:]
	if _, err := s.Batch(uint8(wire.CodecS2), bomb); !errors.Is(err, compress.ErrTooLarge) {
		t.Fatalf("bomb: err = %v, want ErrTooLarge", err)
	}
	flags, p := compressedPayload(t, compress.Spec{Codec: wire.CodecLZ4}, 2, 10, 10)
	p = p[:len(p)-5] // the block's end is missing
	binaryCRC(p)
	if _, err := s.Batch(flags, p); !errors.Is(err, compress.ErrCorrupt) {
		t.Fatalf("corrupt lz4: err = %v, want ErrCorrupt", err)
	}
	if got, _ := s.Commit(); got != 1 {
		t.Fatalf("Commit = %d, want 1", got)
	}
	s.End(true)
	if n, m := c.Counters.TooLargeRaw.Load(), c.Counters.BadCompress.Load(); n != 1 || m != 1 {
		t.Errorf("counters: too large %d, corrupt %d; want 1, 1", n, m)
	}
	if pkts, _ := readDir(t, filepath.Join(c.dir, "bomb")); len(pkts) != 10 {
		t.Fatalf("%d packets in the file, want the first batch's 10", len(pkts))
	}
}

// binaryCRC recomputes a batch payload's checksum after a test changed
// its bytes, so the damage reaches the decompressor.
func binaryCRC(p []byte) {
	tab := crc32.MakeTable(crc32.Castagnoli)
	crc := crc32.Update(crc32.Checksum(p[:24], tab), tab, p[wire.BatchHeaderSize:])
	binary.LittleEndian.PutUint32(p[24:], crc)
}
