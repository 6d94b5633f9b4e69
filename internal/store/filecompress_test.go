package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"

	"github.com/klauspost/compress/gzip"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pcapzstd"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// imixBatch is batch seq of per IMIX UDP packets from packet first on,
// with text payloads (gen.TextPayload) or the generator's pseudo-random
// bytes; it appends the frames to sent.
func imixBatch(seq uint64, first, per int, text bool, sent *[][]byte) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	buf := make([]byte, 1500)
	for i := range per {
		k := uint64(first + i)
		n, _ := gen.MixIMIX.Size(k, nil)
		p := gen.Frame(buf[:n], gen.LinkTypeEthernet, 1, k)
		if text {
			gen.TextPayload(p[42:], 1, k)
		}
		e.Append(int64(ixTS0+k*1000), 0, uint32(n), p)
		*sent = append(*sent, bytes.Clone(p))
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

// writeIMIX writes batches of per IMIX packets (the first textBatches
// with text payloads, the others random) as agent "fc" into a store of
// cfg, committing each, ends the session and returns the file written
// and the packets sent.
func writeIMIX(t *testing.T, cfg Config, textBatches, batches, per int) (string, [][]byte) {
	t.Helper()
	// One file, even when the test runs across an hour (the default
	// interval rotates at the wall clock's hours: CI failed so at 20:00).
	cfg.RotateInterval = -1
	c := newCore(t, cfg)
	s, _, err := c.Begin(hello("fc", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	var sent [][]byte
	for seq := uint64(1); seq <= uint64(batches); seq++ {
		if _, err := s.Batch(0, imixBatch(seq, int(seq-1)*per, per, seq <= uint64(textBatches), &sent)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s.End(true)
	return dataFile(t, filepath.Join(c.Dir(), "fc")), sent
}

// checkSent: the packets of the file at path, decompressed by
// pcapfile.Open (the readers of query), are sent, byte for byte.
func checkSent(t *testing.T, path string, sent [][]byte) {
	t.Helper()
	n := 0
	capturetest.EachPacket(t, path, func(_ *pcapfile.Reader, p *pcapfile.Packet) {
		if n >= len(sent) || !bytes.Equal(p.Data, sent[n]) {
			t.Fatalf("packet %d differs from the one sent", n)
		}
		n++
	})
	if n != len(sent) {
		t.Fatalf("%d packets read, %d sent", n, len(sent))
	}
}

// tsharkCount: tshark reads want packets from the file at path itself
// (Wireshark reads gzip files and zstd files of one frame) or, through
// pipe (a command reading $1 to its standard output), from a pipe.
// Skipped without tshark.
func tsharkCount(t *testing.T, path, pipe string, want int) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("tshark not installed; skipping")
		return
	}
	script := `tshark -r "$1" -T fields -e frame.number | wc -l`
	if pipe != "" {
		script = pipe + ` | tshark -r - -T fields -e frame.number | wc -l`
	}
	out, err := exec.Command("sh", "-c", script, "sh", path).Output()
	n, aerr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || aerr != nil || n != want {
		t.Fatalf("%s: tshark read %q packets (%v), want %d", script, out, err, want)
	}
}

// zstdLiterals counts the compressed blocks of the zstd stream b (every
// frame) by how their literals are coded: Huffman (compressed or
// treeless) or not (raw, RLE); and of those not, the blocks in
// pcapzstd's form: raw literals and sequences coded with the predefined
// tables (the library's level 1 builds its own for the sequences of
// blocks of random IMIX payloads).
func zstdLiterals(t *testing.T, b []byte) (huffman, plain, predefined int) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 6 || binary.LittleEndian.Uint32(b) != 0xFD2FB528 {
			t.Fatalf("no zstd frame at %d bytes from the end", len(b))
		}
		fhd := b[4]
		n := 5
		if fhd&0x20 == 0 {
			n++ // window descriptor
		}
		n += []int{0, 1, 2, 4}[fhd&3]
		fcs := []int{0, 2, 4, 8}[fhd>>6]
		if fcs == 0 && fhd&0x20 != 0 {
			fcs = 1
		}
		b = b[n+fcs:]
		for last := false; !last; {
			if len(b) < 3 {
				t.Fatal("zstd block header cut")
			}
			h := uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16
			last = h&1 == 1
			size := int(h >> 3)
			switch (h >> 1) & 3 {
			case 1: // RLE: one byte
				size = 1
			case 2:
				if size > 0 && b[3]&3 >= 2 {
					huffman++
				} else if size > 0 {
					plain++
					if rawPredefined(b[3 : 3+size]) {
						predefined++
					}
				}
			}
			b = b[3+size:]
		}
		if fhd&4 != 0 {
			b = b[4:]
		}
	}
	return huffman, plain, predefined
}

// rawPredefined reports whether a compressed block (its content, raw
// or RLE literals) has sequences, all coded with the predefined tables.
func rawPredefined(blk []byte) bool {
	var size, hl int
	switch h := blk[0]; (h >> 2) & 3 {
	case 0, 2:
		size, hl = int(h>>3), 1
	case 1:
		size, hl = int(h>>4)|int(blk[1])<<4, 2
	case 3:
		size, hl = int(h>>4)|int(blk[1])<<4|int(blk[2])<<12, 3
	}
	if blk[0]&3 == 1 {
		size = 1 // RLE
	}
	seq := blk[hl+size:]
	switch {
	case seq[0] == 0:
		return false // no sequences
	case seq[0] < 128:
		return seq[1] == 0
	case seq[0] < 255:
		return seq[2] == 0
	}
	return seq[3] == 0
}

// gzipHeads returns the XFL and OS bytes of every gzip member of b:
// XFL 4 where it was compressed at level 1 (the fastest) or by
// pcapflate, 0 at the levels between; OS 3 where pcapflate wrote it,
// 255 where the library did.
func gzipHeads(t *testing.T, b []byte) (xfl, osb []byte) {
	t.Helper()
	br := bytes.NewReader(b)
	for br.Len() > 0 {
		off := len(b) - br.Len()
		if b[off] != 0x1f || b[off+1] != 0x8b {
			t.Fatalf("no gzip member at %d", off)
		}
		xfl, osb = append(xfl, b[off+8]), append(osb, b[off+9])
		zr, err := newGzipMember(br)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, zr); err != nil {
			t.Fatal(err)
		}
	}
	return xfl, osb
}

// TestFileCompressChoice: every file, of each codec and level, random
// or text payloads or text that turns random, holds exactly the packets
// sent, which the standard tools read (zstd -t, gzip -t, tshark); and
// its compression was chosen from its first bytes: a zstd file (or
// frame) of random payloads codes no literal with Huffman and its
// sequences with the predefined tables (pcapzstd's encoder, which finds
// the headers' matches still: the file at least 1.2x smaller), one of
// text does; a zstd frame begun on text goes on with pcapzstd's blocks
// once its packets turn random (judged again at a commit after 4 MiB);
// gzip members of
// random payloads are pcapflate's (matches in the heads, payloads in
// stored blocks: at least 1.15x smaller still), of text the library's
// at the level configured. The default zstd level is 1: on text the default
// compresses as well as zstd:1, better than zstd:3.
func TestFileCompressChoice(t *testing.T) {
	const batches, per = 24, 256 // about 2 MiB of pcapng
	ratio := map[string]float64{}
	for _, tc := range []struct {
		name   string
		spec   compress.Spec
		frames ZstdFrames
		tools  bool // read with zstd, gzip, tshark (the others' layout is zstd's or gzip's)
	}{
		{"zstd", compress.Spec{Codec: compress.Zstd}, ZstdFramePerFile, true},
		{"zstd:1", compress.Spec{Codec: compress.Zstd, Level: 1}, ZstdFramePerFile, false},
		{"zstd:3", compress.Spec{Codec: compress.Zstd, Level: 3}, ZstdFramePerFile, false},
		{"zstd/frames", compress.Spec{Codec: compress.Zstd}, ZstdFramePerBlock, true},
		{"gzip", compress.Spec{Codec: compress.Gzip}, ZstdFramePerFile, true},
		{"gzip:1", compress.Spec{Codec: compress.Gzip, Level: 1}, ZstdFramePerFile, false},
	} {
		for _, kind := range []string{"random", "text", "turns"} {
			name := tc.name + "/" + kind
			text, turns := kind == "text", kind == "turns"
			// turns: text for 2.4 MB, then random for 3.5 MB. A zstd
			// frame is judged again at the first commit after
			// rejudgeBytes (4 MiB), some 1.7 MB into the random part.
			textBatches := map[string]int{"random": 0, "text": batches, "turns": batches}[kind]
			all := batches
			if turns {
				all = batches + 36
			}
			t.Run(name, func(t *testing.T) {
				path, sent := writeIMIX(t, Config{FileCompress: tc.spec, ZstdFrames: tc.frames, Fsync: FsyncNever}, textBatches, all, per)
				checkSent(t, path, sent)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				raw := 0
				if tc.spec.Codec == compress.Zstd {
					raw = len(decodeZstd(t, b))
					if tc.tools {
						checkZstdCLI(t, path, len(sent))
					}
					if tc.tools && tc.frames == ZstdFramePerFile {
						tsharkCount(t, path, "", len(sent)) // Wireshark's own zstd reader: one frame
					}
					huff, plain, ours := zstdLiterals(t, b)
					t.Logf("%d bytes from %d: %d blocks with Huffman literals, %d without (%d pcapzstd's)", len(b), raw, huff, plain, ours)
					small := 0 // the head's and the statistics' frames: too small to judge
					if tc.frames == ZstdFramePerBlock {
						small = 2
					}
					switch {
					case text && huff == 0:
						t.Fatalf("%d blocks with Huffman literals: want them all with for text", huff)
					case kind == "random" && (huff > small || ours == 0):
						t.Fatalf("%d blocks with Huffman literals, %d pcapzstd's: want them all pcapzstd's for random", huff, ours)
					case turns && (huff == 0 || ours < 4):
						// The random part after the switch is 1.8 MB: 13 of pcapzstd's blocks of 128 KiB.
						t.Fatalf("%d blocks with Huffman literals, %d pcapzstd's: want the text's, then pcapzstd's for the random half", huff, ours)
					}
				} else {
					if out, err := exec.Command("gzip", "-t", path).CombinedOutput(); tc.tools && err != nil {
						t.Fatalf("gzip -t: %v %s", err, out)
					}
					if tc.tools {
						tsharkCount(t, path, "", len(sent))
					}
					xfl, osb := gzipHeads(t, b)
					// Random payloads: pcapflate's members (XFL 4, OS 3);
					// text: the library's at the level configured.
					wantXFL, wantOS := byte(0), byte(255)
					if !text || tc.spec.Level == 1 {
						wantXFL = 4
					}
					if !text {
						wantOS = 3
					}
					for i := 1; i < len(xfl)-1 && !turns; i++ { // the head's and the statistics' members are small
						if xfl[i] != wantXFL || osb[i] != wantOS {
							t.Fatalf("member %d of %d: XFL %d, OS %d, want %d and %d (%v %v)", i, len(xfl), xfl[i], osb[i], wantXFL, wantOS, xfl, osb)
						}
					}
					if m := len(osb); turns && (osb[1] != 255 || osb[m-2] != 3) {
						t.Fatalf("members from the library (OS 255), then pcapflate (OS 3) want; OS bytes %v", osb)
					}
					zr, err := gzip.NewReader(bytes.NewReader(b))
					if err != nil {
						t.Fatal(err)
					}
					n, _ := io.Copy(io.Discard, zr)
					raw = int(n)
				}
				ratio[name] = float64(raw) / float64(len(b))
			})
		}
	}
	t.Logf("ratios: %v", ratio)
	if ratio["zstd/random"] < 1.2 || ratio["zstd/frames/random"] < 1.2 {
		t.Fatalf("zstd files of random payloads compress %.3fx, with a frame per block %.3fx: want the headers' repeats found (at least 1.2x)",
			ratio["zstd/random"], ratio["zstd/frames/random"])
	}
	if ratio["gzip/random"] < 1.15 || ratio["gzip:1/random"] < 1.15 {
		t.Fatalf("gzip files of random payloads compress %.3fx, gzip:1 %.3fx: want the headers' repeats found (at least 1.15x)",
			ratio["gzip/random"], ratio["gzip:1/random"])
	}
	if ratio["zstd/text"] < ratio["zstd:1/text"] || ratio["zstd/text"] < ratio["zstd:3/text"] {
		t.Fatalf("zstd files of text compress %.3fx, zstd:1 %.3fx, zstd:3 %.3fx: want the default at least as good as both",
			ratio["zstd/text"], ratio["zstd:1/text"], ratio["zstd:3/text"])
	}
}

// blockingSink is a file that takes its first write (the zstd frame's
// header) and then holds every write until released.
type blockingSink struct {
	mu       sync.Mutex
	buf      bytes.Buffer
	writes   int
	release  chan struct{}
	arrived  chan struct{} // closed when a write is first held
	arrivedO sync.Once
}

func (s *blockingSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.writes++
	first := s.writes == 1
	s.mu.Unlock()
	if !first {
		s.arrivedO.Do(func() { close(s.arrived) })
		<-s.release
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// TestZstdFileAsync: a zstd file is compressed off the writer's
// goroutine, in order and with bounded memory: while the file does not
// take what the compressor wrote (a slow disk), Write returns for the
// first blocks, then holds the caller, having taken at most the
// compressor's chunks (aheadChunks of aheadChunk: the one it compresses
// and the one queued behind it) and what it held to choose; once the file
// takes writes again, a commit returns with everything written, which
// decodes to exactly what was written.
func TestZstdFileAsync(t *testing.T) {
	mw, err := newMemberWriter(compress.Spec{Codec: compress.Zstd}, ZstdFramePerFile)
	if err != nil {
		t.Fatal(err)
	}
	sink := &blockingSink{release: make(chan struct{}), arrived: make(chan struct{})}
	mw.reset(sink)
	const block = 64 << 10 // the encoder's blocks at level 1 (128 KiB from level 3)
	const total = 16 << 20
	data := make([]byte, total)
	var sent []byte
	for k := uint64(0); len(sent) < total; k++ {
		n, _ := gen.MixIMIX.Size(k, nil)
		sent = append(sent, gen.Frame(data[:n], gen.LinkTypeEthernet, 1, k)...)
	}
	sent = sent[:total]
	var taken atomic.Int64
	done := make(chan error, 1)
	go func() {
		for off := 0; off < total; off += 16 << 10 {
			if _, err := mw.Write(sent[off : off+16<<10]); err != nil {
				done <- err
				return
			}
			taken.Add(16 << 10)
		}
		done <- nil
	}()
	// The compressor's first block reaches the file: held there.
	select {
	case <-sink.arrived:
	case err := <-done:
		t.Fatalf("all %d bytes written while the file took none (err %v): unbounded", total, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("no block reached the file after %d bytes written: compressed on the caller's goroutine?", taken.Load())
	}
	// Writes go on past that block (off the caller's goroutine), and stop
	// before the bound: the caller is held, the whole never written.
	// (and what the buffer of compressed bytes, outBuf, holds: this
	// IMIX compresses to no less than half)
	bound := int64(probeBytes + aheadChunks*aheadChunk + 2*outBuf)
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := taken.Load(); n <= probeBytes+block {
			return fmt.Errorf("%d bytes taken while the file held its first block: compressed on the caller's goroutine?", n)
		}
		return nil
	})
	select {
	case err := <-done:
		t.Fatalf("all %d bytes written while the file took none (err %v): unbounded", total, err)
	case <-time.After(200 * time.Millisecond): // a chance to pass the bound, which must hold at any time
	}
	if n := taken.Load(); n > bound {
		t.Fatalf("%d bytes taken while the file took none; want at most %d", n, bound)
	}
	close(sink.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := mw.commit(false); err != nil {
		t.Fatal(err)
	}
	sink.mu.Lock()
	got := decodeZstd(t, append(bytes.Clone(sink.buf.Bytes()), zstdLastBlock[:]...))
	n := int64(sink.buf.Len())
	sink.mu.Unlock()
	if !bytes.Equal(got, sent) || mw.written() != n {
		t.Fatalf("the file decodes to %d bytes, %d written (counted %d of %d on disk)", len(got), len(sent), mw.written(), n)
	}
}

// TestZstdFileMemory: writing a file through the parallel compressor
// holds a bounded amount of memory: 64 MiB of IMIX pcapng through one
// memberWriter, committed every 1 MiB, leave the heap within 8 MiB of
// where it started, and allocate under 1 MiB per 64 MiB.
func TestZstdFileMemory(t *testing.T) {
	mw, err := newMemberWriter(compress.Spec{Codec: compress.Zstd}, ZstdFramePerFile)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 0, 1<<20)
	buf := make([]byte, 1500)
	for k := uint64(0); len(chunk) < 1<<20-1500; k++ {
		n, _ := gen.MixIMIX.Size(k, nil)
		chunk = append(chunk, gen.Frame(buf[:n], gen.LinkTypeEthernet, 1, k)...)
	}
	write := func(mib int) {
		for range mib {
			if _, err := mw.Write(chunk); err != nil {
				t.Fatal(err)
			}
			if err := mw.commit(false); err != nil {
				t.Fatal(err)
			}
		}
	}
	mw.reset(io.Discard)
	write(4) // the encoder's buffers, made once
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	write(64)
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Fatalf("the heap grew by %d bytes writing 64 MiB", grew)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Fatalf("%d bytes allocated writing 64 MiB", alloc)
	}
	if err := mw.finish(); err != nil {
		t.Fatal(err)
	}
}

// newGzipMember reads one gzip member from r.
func newGzipMember(r io.Reader) (*gzip.Reader, error) {
	zr, err := gzip.NewReader(r)
	if err == nil {
		zr.Multistream(false)
	}
	return zr, err
}

// TestMemberWriterChoice: a stream's compression is chosen from its
// first bytes: random IMIX payloads are flat (zstd with pcapzstd's
// encoder; gzip with pcapflate's), text is not, nor a stream too small
// to judge; each stream (file, or frame with a frame per block)
// chooses anew, and a zstd frame on the library's encoder at a flush
// once rejudgeBytes have passed.
func TestMemberWriterChoice(t *testing.T) {
	sample := func(text bool, size int) []byte {
		var sent [][]byte
		imixBatch(1, 0, size/50+12, text, &sent)
		return bytes.Join(sent, nil)[:size]
	}
	for _, tc := range []struct {
		spec   compress.Spec
		frames ZstdFrames
	}{
		{compress.Spec{Codec: compress.Zstd}, ZstdFramePerFile},
		{compress.Spec{Codec: compress.Zstd}, ZstdFramePerBlock},
		{compress.Spec{Codec: compress.Gzip}, ZstdFramePerFile},
	} {
		mw, err := newMemberWriter(tc.spec, tc.frames)
		if err != nil {
			t.Fatal(err)
		}
		mw.reset(io.Discard)
		for i, step := range []struct {
			text bool
			size int
			want bool
		}{
			{false, 200 << 10, true},
			{true, 200 << 10, false},
			{false, minProbe / 2, false},
			{false, probeBytes / 2, true}, // held until the commit, judged there
		} {
			if tc.spec.Codec == compress.Zstd && tc.frames == ZstdFramePerFile {
				mw.reset(io.Discard) // a file is one stream
			}
			if _, err := mw.Write(sample(step.text, step.size)); err != nil {
				t.Fatal(err)
			}
			if err := mw.commit(true); err != nil {
				t.Fatal(err)
			}
			if mw.flat != step.want {
				t.Errorf("%s frames=%s step %d (text %v, %d bytes): flat %v, want %v", tc.spec, tc.frames, i, step.text, step.size, mw.flat, step.want)
			}
			if _, ours := mw.zstd.(*pcapzstd.Encoder); mw.zstd != nil && ours != mw.flat {
				t.Errorf("%s frames=%s step %d: flat %v, but pcapzstd's encoder %v", tc.spec, tc.frames, i, mw.flat, ours)
			}
		}
	}
	// One zstd frame: text, then random (judged again at the flush
	// after rejudgeBytes: pcapzstd goes on in the frame), then text
	// (pcapzstd to the frame's end); the frame decodes to all three.
	for _, frames := range []ZstdFrames{ZstdFramePerFile, ZstdFramePerBlock} {
		mw, err := newMemberWriter(compress.Spec{Codec: compress.Zstd}, frames)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		mw.reset(&out)
		var in []byte
		for i, step := range []bool{true, false, true} {
			size := 400 << 10
			if i == 0 {
				size += rejudgeBytes // judged again at the commit after it
			}
			b := sample(step, size)
			in = append(in, b...)
			if _, err := mw.Write(b); err != nil {
				t.Fatal(err)
			}
			if err := mw.commit(false); err != nil {
				t.Fatal(err)
			}
			if _, ours := mw.zstd.(*pcapzstd.Encoder); ours != (i > 0) || mw.flat != ours {
				t.Errorf("frames=%s step %d (text %v): pcapzstd's encoder %v, flat %v; want both %v", frames, i, step, ours, mw.flat, i > 0)
			}
		}
		if err := mw.finish(); err != nil {
			t.Fatal(err)
		}
		if got := decodeZstd(t, out.Bytes()); !bytes.Equal(got, in) {
			t.Fatalf("frames=%s: the frame decodes to %d bytes, not the %d written", frames, len(got), len(in))
		}
	}
}

// TestCompressedRotateSize: a compressed file is rotated once it
// reaches the rotation size, counting what its compressor goroutine
// still holds: written without a commit between (as a connection
// does while batches keep coming, up to 8 MiB), no file passes the size
// by more than the store's write buffer (1 MiB, which the rotation has
// never counted) and a batch (a compressor that counted only what it
// had compressed let files run two chunks of 1 MiB further).
func TestCompressedRotateSize(t *testing.T) {
	const size, batches, per = 256 << 10, 360, 64 // a batch: about 23 KiB of pcapng
	for _, spec := range []compress.Spec{{Codec: compress.Zstd}, {Codec: compress.Gzip}} {
		t.Run(spec.String(), func(t *testing.T) {
			c := newCore(t, Config{FileCompress: spec, RotateSize: size, Fsync: FsyncNever, IndexBlock: -1})
			s, _, err := c.Begin(hello("rot", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			var sent [][]byte
			largest := 0
			for seq := uint64(1); seq <= batches; seq++ {
				n := len(sent)
				if _, err := s.Batch(0, imixBatch(seq, int(seq-1)*per, per, false, &sent)); err != nil {
					t.Fatal(err)
				}
				b := 0
				for _, p := range sent[n:] {
					b += len(p) + 32
				}
				largest = max(largest, b)
			}
			if _, err := s.Commit(); err != nil {
				t.Fatal(err)
			}
			s.End(true)
			ents, _ := os.ReadDir(filepath.Join(c.Dir(), "rot"))
			files := 0
			for _, e := range ents {
				if index.IsIndex(e.Name()) {
					continue
				}
				files++
				info, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				if info.Size() > size+1<<20+int64(largest) {
					t.Errorf("%s: %d bytes, rotation at %d, the write buffer 1 MiB and a batch at most %d", e.Name(), info.Size(), size, largest)
				}
			}
			if files < 5 {
				t.Fatalf("%d files: want rotation at %d bytes, about 8 MiB written", files, size)
			}
		})
	}
}
