package store

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// checkZstdCLI: the zstd CLI tests the file at path whole, and tshark
// reads want packets (-1: any number) from what zstdcat decodes of it.
// It skips the check when the tools are missing.
func checkZstdCLI(t *testing.T, path string, want int) {
	t.Helper()
	for _, tool := range []string{"zstd", "zstdcat", "tshark"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Logf("%s not installed; skipping the zstd CLI check", tool)
			return
		}
	}
	if out, err := exec.Command("zstd", "-q", "-t", path).CombinedOutput(); err != nil {
		t.Fatalf("zstd -t %s: %v\n%s", path, err, out)
	}
	cmd := exec.Command("sh", "-c", `zstdcat "$1" | tshark -r - -T fields -e frame.number | wc -l`, "sh", path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zstdcat %s | tshark -r -: %v", path, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || want >= 0 && n != want {
		t.Fatalf("zstdcat %s | tshark -r -: %q packets, want %d", path, out, want)
	}
}

// decodeZstd decodes the zstd stream in b (every frame) with a fresh
// decoder.
func decodeZstd(t *testing.T, b []byte) []byte {
	t.Helper()
	zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decoding: %v", err)
	}
	return out
}

// TestZstdFramePerBlock: with ZstdFramePerBlock a zstd file is a frame
// for its head and then a frame per block of its index: every block's
// Seek is a frame's first byte, where a fresh decoder decodes exactly
// the block's bytes; the file decodes to the same pcapng as with one
// frame per file, which the zstd CLI and tshark (through zstdcat) read
// whole.
func TestZstdFramePerBlock(t *testing.T) {
	const batches, per = 60, 10
	decoded := map[ZstdFrames][]byte{}
	for _, frames := range []ZstdFrames{ZstdFramePerFile, ZstdFramePerBlock} {
		t.Run(frames.String(), func(t *testing.T) {
			c := newCore(t, Config{FileCompress: compress.Spec{Codec: compress.Zstd}, ZstdFrames: frames, IndexBlock: MinIndexBlock})
			s, _, err := c.Begin(hello("zf", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			for seq := uint64(1); seq <= batches; seq++ {
				if _, err := s.Batch(0, ipBatch(seq, int(seq-1)*per, per)); err != nil {
					t.Fatal(err)
				}
				if _, err := s.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.w.RecordStats(&wire.Stats{Time: ixTS0, Interfaces: []wire.IfaceStats{{Index: 0, Received: 700, Captured: 600}}}, s.ifmap); err != nil {
				t.Fatal(err)
			}
			s.End(true)
			path := dataFile(t, filepath.Join(c.Dir(), "zf"))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			raw := decodeZstd(t, b)
			decoded[frames] = raw
			checkZstdCLI(t, path, batches*per)
			starts, whole, err := index.ZstdFrames(bytes.NewReader(b), int64(len(b)))
			if err != nil || !whole {
				t.Fatalf("frames: %v (whole %v)", err, whole)
			}
			ix, err := index.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes, %d frames, %d blocks", len(b), len(starts), len(ix.All))
			if frames == ZstdFramePerFile {
				if len(starts) != 1 || ix.Codec != index.CodecZstd {
					t.Fatalf("%d frames, index codec %d; want one frame, CodecZstd", len(starts), ix.Codec)
				}
				return
			}
			// The head's frame, a frame per block, the statistics' frame.
			if ix.Codec != index.CodecZstdFrames || len(ix.All) < 10 || len(starts) != len(ix.All)+2 || starts[0] != 0 {
				t.Fatalf("index codec %d, %d blocks, frames at %v", ix.Codec, len(ix.All), starts)
			}
			for i, blk := range ix.All {
				if blk.Seek != starts[i+1] {
					t.Fatalf("block %d at offset %d, frame %d at %d", i, blk.Seek, i+1, starts[i+1])
				}
				got := decodeZstd(t, b[starts[i+1]:starts[i+2]])
				if !bytes.Equal(got, raw[blk.Raw:blk.RawEnd]) {
					t.Fatalf("block %d: its frame alone decodes to %d bytes, not its %d", i, len(got), blk.RawEnd-blk.Raw)
				}
			}
			if got := decodeZstd(t, b[starts[len(starts)-1]:]); int64(len(got)) != ix.RawSize-ix.All[len(ix.All)-1].RawEnd || len(got) == 0 {
				t.Fatalf("the last frame decodes to %d bytes; want the %d of the statistics", len(got), ix.RawSize-ix.All[len(ix.All)-1].RawEnd)
			}
			if head := decodeZstd(t, b[:starts[1]]); int64(len(head)) != ix.HeadEnd() {
				t.Fatalf("the first frame decodes to %d bytes; want the head's %d", len(head), ix.HeadEnd())
			}
		})
	}
	if a, b := decoded[ZstdFramePerFile], decoded[ZstdFramePerBlock]; !bytes.Equal(a, b) {
		t.Fatalf("a frame per block decodes to %d bytes, one frame per file to %d: want the same pcapng", len(b), len(a))
	}
}

// TestZstdFrameRepair: a crash tears the last frame of a file of a
// frame per block inside a frame (blocks of committed batches flushed,
// then a torn one, the frame not ended) or in the header of a frame
// just begun after a frame's end; repair keeps every committed batch
// and leaves frames the zstd CLI reads whole.
func TestZstdFrameRepair(t *testing.T) {
	// A frame ends after 7 batches of 10 packets of 1000 bytes (64 KiB).
	tests := []struct {
		name    string
		batches int
		tear    []byte // appended to the file
		atEnd   bool   // the file ends at a frame's end before the tear
	}{
		// A raw block's header claiming 1000 bytes, and 100 of them.
		{"inside a frame", 20, append([]byte{0x40, 0x1f, 0x00}, make([]byte, 100)...), false},
		{"in a frame's header", 14, []byte{0x28, 0xb5, 0x2f}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, n := writePart(t, dir, partSpec{fc: compress.Spec{Codec: compress.Zstd}, frames: ZstdFramePerBlock, frameBytes: 64 << 10,
				batches: tt.batches, perBatch: 10, commitEvery: 1, packet: randomPacket})
			b, _ := os.ReadFile(path)
			starts, whole, err := index.ZstdFrames(bytes.NewReader(b), int64(len(b)))
			if err != nil || whole != tt.atEnd || len(starts) < 3 {
				t.Fatalf("before the tear: frames at %v (whole %v, %v); want several, whole %v", starts, whole, err, tt.atEnd)
			}
			appendBytes(t, path, tt.tear)
			res, err := repairPart(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if tt.atEnd && res.kept != int64(len(b)) || !tt.atEnd && res.kept != int64(len(b))+int64(len(zstdLastBlock)) {
				t.Fatalf("repaired to %d bytes of %d; want the whole frames (and a last block ending the torn one)", res.kept, len(b))
			}
			checkRepaired(t, path, res, uint64(tt.batches), n)
		})
	}
}

// TestZstdTurnedRepair: a crash tears a zstd file of one frame that
// began on text (the library's blocks) and went on with pcapzstd's
// (its packets turned random, judged again at a commit); repair keeps
// every committed batch, and the zstd CLI and tshark read the file.
func TestZstdTurnedRepair(t *testing.T) {
	dir := t.TempDir()
	// Text for 2.3 MB, then random for 3.8 MB: judged again at the
	// first commit after rejudgeBytes (4 MiB), 5 batches before the end.
	const batches, per = 16, 1000
	path, n := writePart(t, dir, partSpec{fc: compress.Spec{Codec: compress.Zstd}, batches: batches, perBatch: per, commitEvery: 1, tail: true,
		packet: func(buf []byte, i uint64) []byte {
			p := imixPacket(buf, i)
			if i < 6*per {
				gen.TextPayload(p[42:], 1, i)
			}
			return p
		}})
	b, _ := os.ReadFile(path)
	if huff, _, ours := zstdLiterals(t, append(b, zstdLastBlock[:]...)); huff == 0 || ours == 0 {
		t.Fatalf("%d blocks with Huffman literals, %d pcapzstd's: want the library's on the text, then pcapzstd's", huff, ours)
	}
	res, err := repairPart(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	checkRepaired(t, path, res, batches, n)
}

// checkRepaired: the zstd file repaired at path kept the marks up to
// batch batches and n packets, and, renamed as a finished file, the
// zstd CLI and tshark read them.
func checkRepaired(t *testing.T, path string, res repairResult, batches, n uint64) {
	t.Helper()
	if got := res.marks[partInstance]; got != batches {
		t.Fatalf("marks up to batch %d kept, want %d", got, batches)
	}
	if lens := countPackets(t, path); uint64(len(lens)) != n {
		t.Fatalf("%d packets after repair, want the %d committed", len(lens), n)
	}
	final := strings.TrimSuffix(path, layout.PartSuffix)
	if err := os.Rename(path, final); err != nil {
		t.Fatal(err)
	}
	checkZstdCLI(t, final, int(n))
}
