//go:build linux

package e2e

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestQueryZstdFrames: a collector with --file-compress zstd
// --file-zstd-frames block writes files of several zstd frames, which
// the zstd CLI tests whole and tshark reads whole through zstdcat (all
// packets); pcapsync query's needle and range results equal what
// mergecap and tshark -Y return over the decompressed files.
func TestQueryZstdFrames(t *testing.T) {
	requireTools(t, "tshark", "mergecap", "zstd", "zstdcat")
	ctx := testContext(t)
	in, dir, work := t.TempDir(), t.TempDir(), t.TempDir()
	const count = 20000
	start := time.Now().UnixNano() - 5e9
	file := filepath.Join(in, "zf.pcap")
	writeGenFile(t, file, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: 41, Seed: 41, Nanosecond: true, Start: start, Text: true})
	needles := needleHost(t, file, 997) // every 997th packet from 198.18.7.7
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--file-compress", "zstd", "--file-zstd-frames", "block",
		"--rotate-size", "64K", "--index-block", "8K")
	finishReplay(t, startReplay(t, ctx, addr, "zf", file, "--batch-size", "4K"), count, 30*time.Second)
	waitNoPart(t, dir, 5*time.Second)
	coll.stop(20 * time.Second)

	names := dirEntries(t, filepath.Join(dir, "zf"))
	if len(names) < 3 {
		t.Fatalf("%d files, want rotation", len(names))
	}
	var plain []string
	total, frames := 0, 0
	for _, n := range names {
		path := filepath.Join(dir, "zf", n)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		starts, whole, err := index.ZstdFrames(bytes.NewReader(b), int64(len(b)))
		if err != nil || !whole || len(starts) < 2 {
			t.Fatalf("%s: frames at %v (whole %v, %v); want the head's and the blocks'", n, starts, whole, err)
		}
		frames += len(starts)
		ix, err := index.Open(path)
		if err != nil || ix.Codec != index.CodecZstdFrames {
			t.Fatalf("%s: index %+v (%v); want one of zstd frames", n, ix, err)
		}
		for i, blk := range ix.All {
			if _, ok := slices.BinarySearch(starts, blk.Seek); !ok {
				t.Fatalf("%s: block %d at offset %d, not a frame's start (frames at %v)", n, i, blk.Seek, starts)
			}
		}
		if out, err := exec.Command("zstd", "-q", "-t", path).CombinedOutput(); err != nil {
			t.Fatalf("zstd -t %s: %v\n%s", n, err, out)
		}
		dec := filepath.Join(work, strings.TrimSuffix(n, ".zst"))
		if out, err := exec.Command("sh", "-c", `zstdcat "$1" > "$2"`, "sh", path, dec).CombinedOutput(); err != nil {
			t.Fatalf("zstdcat %s: %v\n%s", n, err, out)
		}
		out, err := exec.Command("sh", "-c", `zstdcat "$1" | tshark -r - -T fields -e frame.number | wc -l`, "sh", path).Output()
		if err != nil {
			t.Fatalf("zstdcat %s | tshark -r -: %v", n, err)
		}
		k, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		if want := len(readQPkts(t, path)); k != want {
			t.Fatalf("zstdcat %s | tshark -r -: %d packets; pcapsync reads %d", n, k, want)
		}
		total += k
		plain = append(plain, dec)
	}
	if total != count {
		t.Fatalf("tshark reads %d packets through zstdcat, %d were sent", total, count)
	}
	// Frames end at commits, which a fast replay makes few: a file
	// holds at least the head's frame and one of packets.
	t.Logf("%d files of %d zstd frames in all", len(names), frames)
	merged := filepath.Join(work, "merged.pcapng")
	runTool(t, "mergecap", append([]string{"-F", "pcapng", "-w", merged}, plain...)...)

	all := readQPkts(t, merged)
	slices.SortStableFunc(all, func(a, b qpkt) int { return int(min(max(a.ts-b.ts, -1), 1)) })
	mid, mid2 := all[len(all)/2].ts, all[len(all)/2+500].ts
	for _, c := range []struct {
		name         string
		since, until int64
		args         []string
		display      string
		want         int // packets, if known
	}{
		{"needle", start - 1e9, start + 3600e9, []string{"host 198.18.7.7"}, "ip.addr == 198.18.7.7", len(needles)},
		{"needle in a range", mid, start + 3600e9, []string{"src host 198.18.7.7"}, "ip.src == 198.18.7.7", -1},
		{"range", mid, mid2, nil, "", 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, got, want := queryAndReference(t, ctx, dir, merged, work, c.name, c.since, c.until, c.args, c.display, 0)
			if len(want) == 0 || c.want >= 0 && len(want) != c.want {
				t.Fatalf("the reference selects %d packets, want %d (-1: some)", len(want), c.want)
			}
			compareQuery(t, got, want)
			t.Logf("%d packets", len(got))
		})
	}
}

// needleHost rewrites the source address of every nth packet of the
// classic pcap file at path (Ethernet/IPv4, as gen writes it) to
// 198.18.7.7 and returns their indexes.
func needleHost(t *testing.T, path string, nth int) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for off, i := 24, 0; off+16 <= len(b); i++ {
		capLen := int(binary.LittleEndian.Uint32(b[off+8:]))
		if i%nth == nth-1 && capLen >= 34 {
			copy(b[off+16+14+12:], []byte{198, 18, 7, 7})
			out = append(out, i)
		}
		off += 16 + capLen
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}
