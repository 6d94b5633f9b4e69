package query

import (
	"bytes"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestZstdWindowCapped: a .zst data file planted in the root that
// declares a large window (a few KiB on disk: 256 MiB of zeros in
// packets) is refused by the query with an error naming the file,
// instead of making its decoder hold the window: the query's memory
// stays what its own buffers are. The store writes 1 MiB windows.
func TestZstdWindowCapped(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, agentSpec{name: "z1", comp: "zstd", batches: [][]tp{{{ts: 1000, port: 5000}}}}, 0)
	path := onlyFile(t, dir, "z1", "*.pcapng.zst")
	os.Remove(index.Path(path)) // read whole: no index to trust
	// 4 096 packets of 64 KiB of zeros, in one stream of a 256 MiB window.
	var out bytes.Buffer
	zw, err := zstd.NewWriter(&out, zstd.WithWindowSize(256<<20), zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewNgWriter(zw, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	w.AddInterface(pcapfile.Interface{Name: "z1:eth0", LinkType: 1, SnapLen: 1 << 20})
	zeros := make([]byte, 64<<10)
	for range 4096 {
		w.WritePacket(0, base+2000, uint32(len(zeros)), zeros)
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
		if !errors.Is(err, zstd.ErrWindowSizeExceeded) {
			t.Errorf("threads %d: %v, want the window refused", threads, err)
		}
		if grew > 64<<20 {
			t.Errorf("threads %d: the query allocated %d MiB", threads, grew>>20)
		}
	}
}
