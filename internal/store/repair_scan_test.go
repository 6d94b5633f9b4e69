package store

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// partSpec describes an unfinished file for writePart.
type partSpec struct {
	fc          compress.Spec
	linkType    uint16
	batches     int
	perBatch    int
	commitEvery int                               // batches between commits (flushes); 0: one commit at the end
	packet      func(buf []byte, i uint64) []byte // packet i, built in buf (at most 1 MiB)
	tail        bool                              // then a batch without its mark, not committed (torn by the crash)
	frames      ZstdFrames                        // of a zstd file, with frameBytes
	frameBytes  int64                             // ZstdFramePerBlock: a frame ends after this much (and an index is written)
}

// partInstance is the instance whose marks writePart writes.
var partInstance = [16]byte{0xAB, 0xCD}

// writePart writes an unfinished file below dir/ag the way a session
// does (headers, batches whose last packet carries the mark, a commit
// every commitEvery batches) and leaves it as a crash does: open, with
// its .part suffix. It returns the path and the packets committed.
func writePart(t testing.TB, dir string, ps partSpec) (path string, packets uint64) {
	t.Helper()
	if ps.linkType == 0 {
		ps.linkType = 1
	}
	af := &agentFile{dir: filepath.Join(dir, "ag"), name: "ag", host: "h1", fsync: FsyncNever, comp: ps.fc,
		zframes: ps.frames, ixBlock: ps.frameBytes}
	if _, err := af.addIface(wire.Interface{Name: "eth0", LinkType: ps.linkType, SnapLen: 262144}); err != nil {
		t.Fatal(err)
	}
	if err := af.writable(time.Now()); err != nil {
		t.Fatal(err)
	}
	inst := &Instance{id: partInstance, name: "ag"}
	buf := make([]byte, 1<<20)
	var i uint64
	write := func(seq uint64, n int, mark bool) {
		for k := range n {
			data := ps.packet(buf, i)
			r := wire.Record{Timestamp: 1_700_000_000_000_000_000 + int64(i)*1000, OrigLen: uint32(len(data)), Data: data}
			var err error
			if k == n-1 && mark {
				err = af.writeLast(0, &r, inst, seq)
			} else {
				err = af.write(0, &r, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			i++
		}
	}
	for b := 1; b <= ps.batches; b++ {
		write(uint64(b), ps.perBatch, true)
		if ps.commitEvery > 0 && b%ps.commitEvery == 0 || b == ps.batches {
			if err := af.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	packets = i
	if ps.tail {
		write(uint64(ps.batches+1), ps.perBatch, false)
		af.bw.Flush()
	}
	af.f.Close() // the process is gone
	return af.path + layout.PartSuffix, packets
}

var zeroPacket = capturetest.ZeroPacket

// imixPacket is packet i of an IMIX of UDP frames with pseudo-random payloads.
func imixPacket(buf []byte, i uint64) []byte {
	n, _ := gen.MixIMIX.Size(i, nil)
	p := gen.Frame(buf[:n], gen.LinkTypeEthernet, 1, i)
	return p
}

// randomPacket is an incompressible 1000-byte packet.
func randomPacket(buf []byte, i uint64) []byte {
	rand.Read(buf[:1000])
	return buf[:1000]
}

// countPackets reads a capture file whole (packets up to 16 MiB) and
// returns its packets' lengths.
func countPackets(t testing.TB, path string) (lens []int) {
	t.Helper()
	f, err := pcapfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f, &pcapfile.ReaderConfig{MaxPacket: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for {
		var p pcapfile.Packet
		if err := r.ReadInto(&p); err == io.EOF {
			return lens
		} else if err != nil {
			t.Fatalf("%s: after %d packets: %v", path, len(lens), err)
		}
		lens = append(lens, len(p.Data))
	}
}

// chunkReader reads b n bytes at a time.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// TestScanChunks: the scanner finds the same marks and cut however the
// stream is cut into writes, for blocks of any size (a packet of
// 300 000 bytes, over what readers accept by default), and stops at a
// torn or foreign block.
func TestScanChunks(t *testing.T) {
	sizes := []int{60, 300_000, 1500, 64}
	dir := t.TempDir()
	path, _ := writePart(t, dir, partSpec{batches: 4, perBatch: 2, commitEvery: 1, tail: true,
		packet: func(buf []byte, i uint64) []byte { return buf[:sizes[i%4]] }})
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := layout.Scan(context.Background(), bytes.NewReader(whole), compress.None)
	if err != nil || ref.Cut == 0 || ref.Marks[partInstance] != 4 {
		t.Fatalf("scan: cut %d, marks %v, %v; want batch 4", ref.Cut, ref.Marks, err)
	}
	if ref.Cut >= int64(len(whole)) {
		t.Fatalf("cut %d of %d: the unmarked tail was kept", ref.Cut, len(whole))
	}
	for _, chunk := range []int{1, 3, 7, 4096, len(whole)} {
		// A plain file read chunk bytes at a time reaches the scanner in
		// writes of that size.
		sc, err := layout.Scan(context.Background(), &chunkReader{b: whole, n: chunk}, compress.None)
		if err != nil {
			t.Fatalf("chunk %d: %v", chunk, err)
		}
		if sc.Cut != ref.Cut || sc.Marks[partInstance] != 4 {
			t.Fatalf("chunks of %d: cut %d, marks %v; want %d, batch 4", chunk, sc.Cut, sc.Marks, ref.Cut)
		}
	}
	damaged := []struct {
		name   string
		at     int64 // offset of the damage
		b      []byte
		before bool // the damage is in the kept part: the cut must move back
	}{
		{"next block's length not a multiple of 4", ref.Cut + 4, []byte{13, 0, 0, 0}, false},
		{"next block shorter than a block", ref.Cut + 4, []byte{8, 0, 0, 0}, false},
		{"last marked block's trailer wrong", ref.Cut - 4, []byte{0, 0, 0, 0}, true},
		{"no section header first", 0, []byte{6, 0, 0, 0}, true},
	}
	for _, d := range damaged {
		b := bytes.Clone(whole)
		copy(b[d.at:], d.b)
		res, _ := layout.Scan(context.Background(), bytes.NewReader(b), compress.None)
		if d.before && res.Cut >= ref.Cut || !d.before && res.Cut != ref.Cut {
			t.Errorf("%s: cut %d; the undamaged file's is %d", d.name, res.Cut, ref.Cut)
		}
	}
}

// TestZstdBlockOffsets checks what zstd repair relies on: decoding with
// one goroutine, the decoder writes each block's output in one Write
// and has read exactly up to that block's end, so every flush the
// writer made shows up as (file offset, decompressed offset); and the
// file cut there plus an empty last block decodes to exactly that much.
func TestZstdBlockOffsets(t *testing.T) {
	var file bytes.Buffer
	enc, err := newZstdFileEncoder(zstd.SpeedDefault)
	if err != nil {
		t.Fatal(err)
	}
	cw := &countingWriter{w: &file}
	enc.Reset(cw)
	type point struct{ comp, raw int64 }
	var flushes []point
	var raw int64
	data := make([]byte, 3<<20)
	for i, n := range []int{100, 5000, 200 << 10, 1, 3 << 20, 77777} {
		if i%2 == 0 {
			rand.Read(data[:n])
		} else {
			clear(data[:n])
		}
		enc.Write(data[:n])
		raw += int64(n)
		if err := enc.Flush(); err != nil {
			t.Fatal(err)
		}
		flushes = append(flushes, point{cw.n.Load(), raw})
	}
	cr := &readCounter{r: bytes.NewReader(file.Bytes())}
	br := bufio.NewReaderSize(cr, layout.ScanBufSize)
	dec, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	seen := map[point]bool{}
	var got int64
	dec.WriteTo(writerFunc(func(p []byte) (int, error) {
		got += int64(len(p))
		seen[point{cr.n - int64(br.Buffered()), got}] = true
		return len(p), nil
	}))
	for _, f := range flushes {
		if !seen[f] {
			t.Fatalf("flush at file offset %d (%d decompressed) was not seen at the end of a Write; seen %v", f.comp, f.raw, seen)
		}
		cut := append(bytes.Clone(file.Bytes()[:f.comp]), zstdLastBlock[:]...)
		out, err := zstdDecodeAll(cut)
		if err != nil || int64(len(out)) != f.raw {
			t.Fatalf("cut at %d + last block: %d bytes, %v; want %d", f.comp, len(out), err, f.raw)
		}
	}
}

func zstdDecodeAll(b []byte) ([]byte, error) {
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	return dec.DecodeAll(b, nil)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestZstdTailRefusesBadCut: a cut that does not decode to what was
// scanned is refused before anything is cut.
func TestZstdTailRefusesBadCut(t *testing.T) {
	dir := t.TempDir()
	path, _ := writePart(t, dir, partSpec{fc: compress.Spec{Codec: compress.Zstd}, batches: 3, perBatch: 10, commitEvery: 1, packet: imixPacket})
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc, err := layout.Scan(context.Background(), f, compress.Zstd)
	if err != nil || sc.Cut == 0 {
		t.Fatalf("scan: %+v, %v", sc, err)
	}
	if _, err := zstdTail(f, sc.Cut, sc.Raw); err != nil {
		t.Fatalf("the scanned cut: %v", err)
	}
	if _, err := zstdTail(f, sc.Cut-1, sc.Raw); err == nil {
		t.Fatal("a cut one byte short was accepted")
	}
	if _, err := zstdTail(f, sc.Cut, sc.Raw+1); err == nil {
		t.Fatal("a cut that decodes to less than scanned was accepted")
	}
}

// TestRepairPacketSizes: every codec, a batch ending in a 300 000-byte
// packet (link type 231, D-Bus, whose packets may be that long) and
// batches of 1-byte packets survive repair whole.
func TestRepairPacketSizes(t *testing.T) {
	sizes := []int{100, 300_000, 1, 1}
	for _, fc := range []compress.Spec{{}, {Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		t.Run(fc.String(), func(t *testing.T) {
			dir := t.TempDir()
			path, n := writePart(t, dir, partSpec{fc: fc, linkType: 231, batches: 2, perBatch: 2, commitEvery: 1, tail: true,
				packet: func(buf []byte, i uint64) []byte { return buf[:sizes[i%4]] }})
			res, err := repairPart(context.Background(), path)
			if err != nil || res.marks[partInstance] != 2 || res.kept == 0 {
				t.Fatalf("repair: %+v, %v; want batch 2 kept", res, err)
			}
			lens := countPackets(t, path)
			if uint64(len(lens)) != n || lens[1] != 300_000 {
				t.Fatalf("%d packets after repair (second %v), want %d with the 300 000-byte one", len(lens), lens, n)
			}
		})
	}
}

// TestRepairGzipHugeMember: one gzip member of ~100 MiB decompressed
// (one commit for all of it) is read through, not cut away.
func TestRepairGzipHugeMember(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	path, n := writePart(t, dir, partSpec{fc: compress.Spec{Codec: compress.Gzip, Level: 1}, batches: 70, perBatch: 1000, tail: true, packet: zeroPacket})
	written := time.Since(start)
	res, err := repairPart(context.Background(), path)
	if err != nil || res.marks[partInstance] != 70 {
		t.Fatalf("repair: %+v, %v; want batch 70", res, err)
	}
	repaired := time.Since(start) - written
	if got := len(countPackets(t, path)); uint64(got) != n {
		t.Fatalf("%d packets after repair, want %d", got, n)
	}
	t.Logf("%d packets (%d MB decompressed) in one member: written in %v, repaired in %v", n, n*1500>>20, written.Round(time.Millisecond), repaired.Round(time.Millisecond))
}

// readCounter counts Read calls.
// readCounter counts the calls to Read and the bytes read.
type readCounter struct {
	r     io.Reader
	calls int
	n     int64
}

func (c *readCounter) Read(p []byte) (int, error) {
	c.calls++
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestRepairReadCalls: repair reads a file in large chunks whatever the
// codec reads at a time (flate reads byte by byte).
func TestRepairReadCalls(t *testing.T) {
	for _, fc := range []compress.Spec{{}, {Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		t.Run(fc.String(), func(t *testing.T) {
			dir := t.TempDir()
			path, _ := writePart(t, dir, partSpec{fc: fc, batches: 40, perBatch: 100, commitEvery: 4, packet: randomPacket})
			f, err := os.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			st, _ := f.Stat()
			rc := &readCounter{r: f}
			res, err := layout.Scan(context.Background(), rc, fc.Codec)
			if err != nil || res.Marks[partInstance] != 40 {
				t.Fatalf("scan: %+v, %v", res, err)
			}
			if most := st.Size()/(64<<10) + 4; int64(rc.calls) > most {
				t.Fatalf("%d read calls for %d bytes, want at most %d", rc.calls, st.Size(), most)
			}
			t.Logf("%d read calls for %d bytes", rc.calls, st.Size())
		})
	}
}

// TestRepairStopsOnContext: a repair cancelled (Close) leaves the file
// as it was.
func TestRepairStopsOnContext(t *testing.T) {
	dir := t.TempDir()
	path, _ := writePart(t, dir, partSpec{fc: compress.Spec{Codec: compress.Zstd}, batches: 3, perBatch: 10, commitEvery: 1, tail: true, packet: randomPacket})
	before, _ := os.ReadFile(path)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := repairPart(ctx, path); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a cancelled repair changed the file")
	}
}

var benchRepairMiB = flag.Int64("repair-mib", 64, "BenchmarkRepair: decompressed MiB of IMIX packets per file")

// BenchmarkRepair times the repair of one unfinished file of each kind,
// -repair-mib MiB of IMIX packets (text payloads, which compress about
// 25x, or pseudo-random ones, which do not) in packet blocks, committed
// every 20 batches of 1000 packets, with a torn batch at its end. Run it
// with -benchtime=1x: the file is generated once, outside the timing.
func BenchmarkRepair(b *testing.B) {
	payloads := []struct {
		name string
		fill func(p []byte, stream uint32, seq uint64)
	}{{"text", gen.TextPayload}, {"random", gen.Payload}}
	for _, fc := range []compress.Spec{{}, {Codec: compress.Gzip}, {Codec: compress.Zstd}} {
		for _, pl := range payloads {
			b.Run(fc.String()+"/"+pl.name, func(b *testing.B) {
				dir := b.TempDir()
				perBatch := 1000 // ~390 KB of IMIX in packet blocks
				batches := int(*benchRepairMiB<<20) / (perBatch * 390)
				path, n := writePart(b, dir, partSpec{fc: fc, batches: batches, perBatch: perBatch, commitEvery: 20, tail: true,
					packet: func(buf []byte, i uint64) []byte {
						n, _ := gen.MixIMIX.Size(i, nil)
						pl.fill(buf[:n], 1, i)
						return buf[:n]
					}})
				st, _ := os.Stat(path)
				b.SetBytes(*benchRepairMiB << 20)
				b.ResetTimer()
				var res repairResult
				for range b.N {
					var err error
					if res, err = repairPart(context.Background(), path); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if res.marks[partInstance] != uint64(batches) {
					b.Fatalf("repair kept up to batch %d of %d", res.marks[partInstance], batches)
				}
				sec := b.Elapsed().Seconds() / float64(b.N)
				b.ReportMetric(float64(st.Size())/1e6/sec, "file-MB/s")
				b.Logf("%s, %s payloads: %d packets, %.0f MB on disk, repaired in %.2fs", fc, pl.name, n, float64(st.Size())/1e6, sec)
			})
		}
	}
}
