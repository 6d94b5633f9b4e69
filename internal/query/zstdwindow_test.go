package query

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/index"
)

// TestZstdWindowCapped: a .zst data file planted in the root that
// declares a large window (a few KiB on disk: 256 MiB of zeros in
// packets) is refused by the query with an error naming the file,
// instead of making its decoder hold the window: the query's memory
// stays what its own buffers are. The store writes 1 MiB windows.
func TestZstdWindowCapped(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, agentSpec{name: "z1", comp: "zstd", batches: [][]tp{{{ts: 1000, port: 5000}}}}, 0)
	files, _ := filepath.Glob(filepath.Join(dir, "z1", "*.pcapng.zst"))
	if len(files) != 1 {
		t.Fatalf("%q, want one zstd file", files)
	}
	path := files[0]
	os.Remove(index.Path(path)) // read whole: no index to trust
	// Its section header and interface, then 4 096 packets of 64 KiB of
	// zeros, all in one stream of a 256 MiB window.
	plain, err := readZstd(path)
	if err != nil {
		t.Fatal(err)
	}
	head := plain[:headLen(t, plain)]
	var raw bytes.Buffer
	raw.Write(head)
	le := binary.LittleEndian
	const size = 64 << 10
	epb := make([]byte, 32+size)
	le.PutUint32(epb[0:], 6)
	le.PutUint32(epb[4:], uint32(len(epb)))
	le.PutUint32(epb[8:], 0)
	ts := uint64(base + 2000)
	le.PutUint32(epb[12:], uint32(ts>>32))
	le.PutUint32(epb[16:], uint32(ts))
	le.PutUint32(epb[20:], size)
	le.PutUint32(epb[24:], size)
	le.PutUint32(epb[len(epb)-4:], uint32(len(epb)))
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithWindowSize(256<<20), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(head)
	for range 4096 {
		zw.Write(epb)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o640); err != nil {
		t.Fatal(err)
	}
	t.Logf("planted %d bytes declaring a 256 MiB window", out.Len())
	for _, threads := range []int{1, 2} {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Run(t.Context(), Config{Dir: dir, Threads: threads}, io.Discard)
		runtime.ReadMemStats(&after)
		grew := after.TotalAlloc - before.TotalAlloc
		t.Logf("threads %d: %v; %d MiB allocated", threads, err, grew>>20)
		if err == nil || !errors.Is(err, zstd.ErrWindowSizeExceeded) {
			t.Errorf("threads %d: %v, want the window refused", threads, err)
		}
		if grew > 64<<20 {
			t.Errorf("threads %d: the query allocated %d MiB", threads, grew>>20)
		}
	}
}

// readZstd is the decoded bytes of the zstd file at path.
func readZstd(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(b, nil)
}

// headLen is the length of the section header and interface blocks
// that start the pcapng stream b.
func headLen(t *testing.T, b []byte) int {
	t.Helper()
	n := 0
	for n+8 <= len(b) {
		typ := binary.LittleEndian.Uint32(b[n:])
		if typ != 0x0A0D0D0A && typ != 1 {
			return n
		}
		n += int(binary.LittleEndian.Uint32(b[n+4:]))
	}
	t.Fatal("no packet after the head")
	return 0
}
