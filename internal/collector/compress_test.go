package collector

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
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
	if codec != sp.Wire() {
		t.Fatalf("%s did not compress the test batch", sp)
	}
	return uint8(codec), e.FinishCompressed(frame, seq, codec)[wire.HeaderSize:]
}

// TestCompressedBatches: batches of every codec, mixed with raw ones in
// one session, are written packet for packet as if sent raw, counted,
// and deduplicated before being decompressed.
func TestCompressedBatches(t *testing.T) {
	c := newCore(t, Config{})
	s, w, err := c.begin(hello("z", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if w.Codecs != acceptedCodecs|wire.FeatureInfo {
		t.Fatalf("welcome offers codecs %b", w.Codecs)
	}
	specs := []compress.Spec{{Codec: compress.LZ4}, {Codec: compress.S2}, {Codec: compress.Zstd}, {Codec: compress.Zstd, Level: 19}}
	seq := uint64(0)
	for i, sp := range specs {
		seq++
		flags, p := compressedPayload(t, sp, seq, 20*i, 10)
		if dup, err := s.batch(flags, p); dup || err != nil {
			t.Fatalf("%s: dup %v, %v", sp, dup, err)
		}
		seq++
		if dup, err := s.batch(0, batchPayload(seq, 20*i+10, 10)); dup || err != nil {
			t.Fatalf("raw after %s: dup %v, %v", sp, dup, err)
		}
	}
	flags, p := compressedPayload(t, specs[0], 1, 0, 10)
	if dup, err := s.batch(flags, p); !dup || err != nil {
		t.Fatalf("resent compressed batch 1: dup %v, %v", dup, err)
	}
	if got, err := s.commit(); got != seq || err != nil {
		t.Fatalf("Commit = %d, %v", got, err)
	}
	s.end(true)
	pkts, _ := readDir(t, filepath.Join(c.Dir(), "z"))
	if len(pkts) != 80 {
		t.Fatalf("%d packets written, want 80", len(pkts))
	}
	for i, p := range pkts {
		if p.Data[0] != byte(i) || len(p.Data) != 60+i%40 || p.OrigLen != uint32(100+i%7) || p.TS != int64(1_700_000_000_000_000_000+i*1000) {
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
	s, _, err := c.begin(hello("bomb", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.batch(0, batchPayload(1, 0, 10)); err != nil {
		t.Fatal(err)
	}
	// 1 MiB of zeros in a 60-byte s2 block, declared as such.
	var e wire.BatchEncoder
	e.Reset(nil)
	e.Append(1, 0, 1<<20, make([]byte, 1<<20))
	frame := append(wire.CompressedFrame(nil), s2.Encode(nil, e.Records())...)
	bomb := e.FinishCompressed(frame, 2, wire.CodecS2)[wire.HeaderSize:]
	if _, err := s.batch(uint8(wire.CodecS2), bomb); !errors.Is(err, compress.ErrTooLarge) {
		t.Fatalf("bomb: err = %v, want ErrTooLarge", err)
	}
	flags, p := compressedPayload(t, compress.Spec{Codec: compress.LZ4}, 2, 10, 10)
	p = p[:len(p)-5] // the block's end is missing
	binaryCRC(p)
	if _, err := s.batch(flags, p); !errors.Is(err, compress.ErrCorrupt) {
		t.Fatalf("corrupt lz4: err = %v, want ErrCorrupt", err)
	}
	if got, _ := s.commit(); got != 1 {
		t.Fatalf("Commit = %d, want 1", got)
	}
	s.end(true)
	if n, m := c.Counters.TooLargeRaw.Load(), c.Counters.BadCompress.Load(); n != 1 || m != 1 {
		t.Errorf("counters: too large %d, corrupt %d; want 1, 1", n, m)
	}
	if pkts, _ := readDir(t, filepath.Join(c.Dir(), "bomb")); len(pkts) != 10 {
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

// zeroBatchFrame is a whole batch frame of n 1500-byte frames of zeros
// (but for their number), its records compressed with zstd.
func zeroBatchFrame(t *testing.T, seq uint64, first, n int) []byte {
	t.Helper()
	var e wire.BatchEncoder
	e.Reset(nil)
	buf := make([]byte, 1500)
	for i := range n {
		e.Append(int64(1_700_000_000_000_000_000+(first+i)*1000), 0, 1500, zeroPacket(buf, uint64(first+i)))
	}
	enc, err := compress.NewEncoder(compress.Spec{Codec: compress.Zstd})
	if err != nil {
		t.Fatal(err)
	}
	frame, codec := enc.Compress(wire.CompressedFrame(nil), e.Records())
	if codec != wire.CodecZstd {
		t.Fatal("zeros did not compress")
	}
	return e.FinishCompressed(frame, seq, codec)
}

// gzipMemberSizes returns the decompressed size of each member of a
// gzip file.
func gzipMemberSizes(t *testing.T, path string) []int64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var sizes []int64
	var zr gzip.Reader
	for zr.Reset(br) == nil {
		zr.Multistream(false)
		n, err := io.Copy(io.Discard, &zr)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, n)
	}
	return sizes
}

// TestWireZstdGzipFileRepair: an agent sending zstd-compressed batches
// of compressible packets, as fast as the collector reads, to a
// collector writing gzip files: each gzip member holds about the commit
// threshold of decompressed records (not of wire bytes), and the file,
// marked unfinished and repaired, keeps every packet.
func TestWireZstdGzipFileRepair(t *testing.T) {
	const batches, per = 70, 1000 // 105 MB decompressed, a few hundred KB on the wire
	dir := t.TempDir()
	cfg := Config{Store: store.Config{Dir: dir, FileCompress: compress.Spec{Codec: compress.Gzip, Level: 1}}, Insecure: true}
	c := newCore(t, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(c).Serve(ctx, ln) }()
	// The frames are built before the agent connects: building them
	// takes longer than the peer timeout under the race detector.
	var out []byte
	for b := range batches {
		out = append(out, zeroBatchFrame(t, uint64(b+1), b*per, per)...)
	}
	t.Logf("%d batches: %d bytes on the wire", batches, len(out))
	s := dial(t, ln.Addr().String(), nil, "zz", "")
	if ok, reason, err := s.reply(); !ok {
		t.Fatalf("no welcome: %q, %v", reason, err)
	}
	s.conn.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := s.conn.Write(out); err != nil {
		t.Fatal(err)
	}
	for acked := uint64(0); acked < batches; {
		h, p, err := s.fr.Next()
		if err != nil || h.Type != wire.TypeAck {
			t.Fatalf("waiting for acks: %s, %v", h.Type, err)
		}
		acked, _ = wire.ParseAck(p)
	}
	s.conn.(*net.TCPConn).CloseWrite()
	s.fr.Next()
	waitSessionsEnded(t, c)
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	c.Close()

	files, _ := filepath.Glob(filepath.Join(dir, "zz", "*.pcapng.gz"))
	if len(files) != 1 {
		t.Fatalf("%d files, want 1", len(files))
	}
	sizes := gzipMemberSizes(t, files[0])
	most := int64(commitBytes + 2*per*(1500+64))
	for i, n := range sizes {
		if n > most {
			t.Fatalf("member %d of %d holds %d bytes decompressed, want at most %d", i, len(sizes), n, most)
		}
	}
	// The process stops before the file loses its suffix.
	part := files[0] + store.PartSuffix
	if err := os.Rename(files[0], part); err != nil {
		t.Fatal(err)
	}
	c2 := newCore(t, cfg)
	if _, w, err := c2.begin(hello("zz", 'z'), Peer{}, func() {}); err != nil || w.LastSeq != batches {
		t.Fatalf("after repair LastSeq %d (%v), want %d", w.LastSeq, err, batches)
	}
	if pkts, _ := readDir(t, filepath.Join(dir, "zz")); len(pkts) != batches*per {
		t.Fatalf("%d packets after repair, want %d (%d members)", len(pkts), batches*per, len(sizes))
	}
}

var zeroPacket = capturetest.ZeroPacket
