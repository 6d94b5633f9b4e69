package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// TestZstdFrames: frames are found by their headers whatever their
// options (content size, single segment, checksum, raw, RLE and
// compressed blocks, skippable frames); a torn last frame is reported,
// not whole; bytes that are not frames fail.
func TestZstdFrames(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 300<<10)
	for i := range random {
		random[i] = byte(rnd.Uint32())
	}
	text := bytes.Repeat([]byte("pcapsync zstd frames "), 20000)
	zeros := make([]byte, 200<<10)
	enc := func(t *testing.T, p []byte, opts ...zstd.EOption) []byte {
		t.Helper()
		var b bytes.Buffer
		z, err := zstd.NewWriter(&b, append(opts, zstd.WithEncoderConcurrency(1))...)
		if err != nil {
			t.Fatal(err)
		}
		// Written in pieces and flushed: a frame of many blocks.
		for len(p) > 0 {
			n := min(len(p), 40<<10)
			z.Write(p[:n])
			z.Flush()
			p = p[n:]
		}
		z.Close()
		return b.Bytes()
	}
	all, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	skip := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, zstdSkipMagic+3), 5)
	skip = append(skip, 1, 2, 3, 4, 5)
	frames := [][]byte{
		enc(t, text, zstd.WithEncoderCRC(false), zstd.WithWindowSize(1<<20)),
		enc(t, random, zstd.WithEncoderCRC(true)),
		all.EncodeAll(text[:1000], nil), // single segment, content size
		skip,
		enc(t, zeros), // RLE blocks
		all.EncodeAll(nil, nil),
	}
	var file []byte
	var want []int64
	for _, f := range frames {
		want = append(want, int64(len(file)))
		file = append(file, f...)
	}
	starts, whole, err := ZstdFrames(bytes.NewReader(file), int64(len(file)))
	if err != nil || !whole || !slices.Equal(starts, want) {
		t.Fatalf("frames at %v (whole %v, %v), want %v", starts, whole, err, want)
	}
	// Cut anywhere inside the last frame but one: that frame is torn.
	last := want[len(want)-2]
	for _, cut := range []int64{last + 1, last + 5, last + 10, int64(len(file)) - int64(len(frames[len(frames)-1])) - 1} {
		starts, whole, err := ZstdFrames(bytes.NewReader(file[:cut]), cut)
		if err != nil || whole || !slices.Equal(starts, want[:len(want)-1]) {
			t.Fatalf("cut at %d: frames at %v (whole %v, %v), want %v torn", cut, starts, whole, err, want[:len(want)-1])
		}
	}
	if _, _, err := ZstdFrameEnd(bytes.NewReader([]byte("not a zstd frame")), 0, 16); err == nil || errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("not a frame: %v", err)
	}
}
