package query

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/store"
)

// hostBatches is n batches of per packets, alternating eth0 and eth1,
// step ns apart; the packets of batches in needle have source host h.
func hostBatches(n, per int, step int64, needle map[int]bool, h byte) [][]tp {
	var out [][]tp
	for b := range n {
		var batch []tp
		for i := range per {
			k := int64(b*per + i)
			p := tp{ts: k * step, iface: b % 2, port: uint16(5000 + k%4)}
			if needle[b] && i%5 == 0 {
				p.host = h
			}
			batch = append(batch, p)
		}
		out = append(out, batch)
	}
	return out
}

// indexedAgents writes a1 (plain, rotating), b2 (gzip, rotating), c3
// (zstd, still open), d4 (plain, still open), e5 (gzip, still open),
// f6 (zstd of a frame per block, rotating) and g7 (zstd of a frame per
// block, still open) with small index blocks; host 10.9.9.7 appears in
// a few batches.
func indexedAgents(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	needle := map[int]bool{7: true, 31: true}
	for i, a := range []agentSpec{
		{name: "a1", rotate: 64 << 10, stats: true},
		{name: "b2", comp: "gzip", rotate: 64 << 10, stats: true},
		{name: "f6", comp: "zstd", frames: store.ZstdFramePerBlock, rotate: 32 << 10, stats: true},
		// Closed ones first: a store opened on dir repairs .part files.
		{name: "c3", comp: "zstd", open: true},
		{name: "d4", open: true},
		{name: "e5", comp: "gzip", open: true},
		{name: "g7", comp: "zstd", frames: store.ZstdFramePerBlock, open: true},
	} {
		a.ixBlock = 4096
		a.batches = hostBatches(40, 50, 10_000+int64(i)*7, needle, 7)
		if !a.open {
			writeAgent(t, dir, a, i)
			continue
		}
		// A store opened on dir would repair another's .part: each
		// file being written is written apart and copied in.
		own := t.TempDir()
		writeAgent(t, own, a, i)
		os.MkdirAll(filepath.Join(dir, a.name), 0o750)
		files, _ := filepath.Glob(filepath.Join(own, a.name, "*.part"))
		if len(files) != 2 {
			t.Fatalf("%s: %q, want a .part and its index", a.name, files)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(filepath.Join(dir, a.name, filepath.Base(f)), b, 0o640)
		}
	}
	return dir
}

// TestIndexedSameAsScan: a query through the indexes writes byte for
// byte what it writes scanning the files whole (Config.NoIndex, and
// with the indexes removed), for plain, gzip and zstd files and .part
// files, ranges inside and across files, needle and broad filters; and
// the index is used.
func TestIndexedSameAsScan(t *testing.T) {
	dir := indexedAgents(t)
	all := int64(math.MaxInt64 - base)
	cases := []struct {
		name         string
		filter       string
		since, until int64
		agents       []string
		skips        bool // the index must skip blocks
	}{
		{name: "all", since: -1e9, until: all},
		// Ethernet may carry ARP naming the host: time only.
		{name: "needle with arp", filter: "host 10.9.9.7", since: -1e9, until: all},
		{name: "needle ip", filter: "ip host 10.9.9.7", since: -1e9, until: all, skips: true},
		{name: "needle and port", filter: "ip src host 10.9.9.7 and udp port 5001", since: -1e9, until: all, skips: true},
		{name: "arp needle and port", filter: "src host 10.9.9.7 and udp port 5001", since: -1e9, until: all},
		{name: "needle or port", filter: "ip src host 10.9.9.7 or udp port 5001", since: -1e9, until: all},
		{name: "inside a file", agents: []string{"a1", "b2"}, since: 3_000_000, until: 3_400_000, skips: true},
		{name: "across files", since: 2_000_000, until: 12_000_000, skips: true},
		{name: "range and needle", filter: "ip host 10.9.9.7", since: 0, until: 5_000_000, skips: true},
		{name: "broad", filter: "udp", since: 1_000_000, until: 9_000_000},
		{name: "negation", filter: "not port 5001", since: 4_000_000, until: all},
		{name: "unknown or", filter: "ip host 10.9.9.7 or net 10.1.0.0/16", since: -1e9, until: all},
		{name: "nothing", filter: "ip host 10.9.9.99", since: -1e9, until: all, skips: true},
		{name: "edges", since: 1_230_000, until: 1_230_000 + 10_001},
	}
	run := func(t *testing.T, i int, noIndex bool) ([]byte, Result) {
		t.Helper()
		c := cases[i]
		cfg := Config{Dir: dir, Filter: c.filter, Agents: c.agents, Since: ts(c.since), NoIndex: noIndex}
		if c.until != all {
			cfg.Until = ts(c.until)
		}
		out, res, err := runQuery(t, cfg)
		if err != nil {
			t.Fatalf("%s (no index %v): %v", c.name, noIndex, err)
		}
		return out, res
	}
	indexed := make([][]byte, len(cases))
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, res := run(t, i, false)
			scan, sres := run(t, i, true)
			indexed[i] = out
			if !bytes.Equal(withoutComments(t, out), withoutComments(t, scan)) {
				t.Fatalf("indexed: %d bytes (%s); scan: %d bytes (%s)", len(out), res, len(scan), sres)
			}
			if res.FilesIndexed != res.FilesRead || res.FilesScanned != 0 || sres.FilesScanned != sres.FilesRead {
				t.Errorf("indexed %+v; scan %+v", res, sres)
			}
			if c.skips && (res.BlocksSkipped == 0 || res.BytesRead >= sres.BytesRead) {
				t.Errorf("nothing skipped: indexed %+v; scan %+v", res, sres)
			}
			// The index's verification reads the start of every block
			// of a plain file (index.Verify): with these 4 KiB blocks,
			// about 4% of the bytes on top of those of the blocks.
			if res.BytesRead > sres.BytesRead+sres.BytesRead/16 {
				t.Errorf("indexed read %d bytes, scan %d", res.BytesRead, sres.BytesRead)
			}
			t.Logf("%d packets; bytes read: indexed %d (%d blocks read, %d skipped), scan %d", res.Packets, res.BytesRead, res.BlocksRead, res.BlocksSkipped, sres.BytesRead)
		})
	}
	// Without the indexes.
	idx, _ := filepath.Glob(filepath.Join(dir, "*", "*.idx*"))
	if len(idx) < 5 {
		t.Fatalf("indexes %q", idx)
	}
	for _, p := range idx {
		os.Remove(p)
	}
	for i, c := range cases {
		out, res := run(t, i, false)
		if !bytes.Equal(withoutComments(t, out), withoutComments(t, indexed[i])) || res.FilesIndexed != 0 {
			t.Errorf("%s: without indexes: %d bytes, %+v; with: %d bytes", c.name, len(out), res, len(indexed[i]))
		}
	}
}

// TestDamagedIndexScanned: an index that does not verify (damaged, or
// of another size of data file) is not used: the file is scanned and
// counted, and the result is the same.
func TestDamagedIndexScanned(t *testing.T) {
	dir := indexedAgents(t)
	cfg := Config{Dir: dir, Agents: []string{"a1", "b2"}, Filter: "ip host 10.9.9.7"}
	want, res0, err := runQuery(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "a1", "*.idx"))
	gz, _ := filepath.Glob(filepath.Join(dir, "b2", "*.idx"))
	if len(idx) < 2 || len(gz) < 1 {
		t.Fatalf("indexes %q %q", idx, gz)
	}
	b, _ := os.ReadFile(idx[0])
	b[len(b)/2] ^= 0xff // a flipped byte
	os.WriteFile(idx[0], b, 0o640)
	// An index of another file (sound, but stale for this one).
	b, _ = os.ReadFile(idx[1])
	os.WriteFile(gz[0], b, 0o640)
	out, res, err := runQuery(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(withoutComments(t, out), withoutComments(t, want)) || res.FilesScanned != 2 || res.FilesIndexed != res0.FilesIndexed-2 {
		t.Errorf("damaged: %d bytes, %+v; intact: %d bytes, %+v", len(out), res, len(want), res0)
	}
}

// TestIndexReadsLittle: a needle query (one host, under 0.1% of the
// packets) reads under 2% of the bytes of plain, gzip and zstd files
// of a frame per block, each, writing what a scan writes, and a
// 1-minute range of an hour's capture a small share.
func TestIndexReadsLittle(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 3x12 MB")
	}
	dir := t.TempDir()
	const batches, per = 1200, 100
	step := int64(time.Hour) / (batches * per) // an hour
	needle := map[int]bool{400: true, 401: true}
	var total int64
	agents := []agentSpec{
		{name: "p1", rotate: 4 << 20},
		{name: "g1", comp: "gzip", rotate: 4 << 20},
		{name: "z1", comp: "zstd", frames: store.ZstdFramePerBlock, rotate: 4 << 20, stats: true},
	}
	for i, a := range agents {
		a.ixBlock = 64 << 10
		a.batches = hostBatches(batches, per, step, needle, 7)
		writeAgent(t, dir, a, i)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	for _, f := range files {
		st, _ := os.Stat(f)
		total += st.Size()
	}
	for _, c := range []struct {
		name         string
		filter       string
		since, until int64
		share        float64
		packets      int64
	}{
		{name: "needle", filter: "ip host 10.9.9.7", since: 0, until: int64(2 * time.Hour), share: 0.02, packets: 40},
		{name: "minute", since: int64(30 * time.Minute), until: int64(31 * time.Minute), share: 0.03},
	} {
		cfg := Config{Dir: dir, Filter: c.filter, Since: ts(c.since), Until: ts(c.until)}
		_, res, err := runQuery(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		share := float64(res.BytesRead) / float64(total)
		t.Logf("%s: %d packets, %d of %d bytes read (%.2f%%); %d blocks read, %d skipped", c.name, res.Packets, res.BytesRead, total, 100*share, res.BlocksRead, res.BlocksSkipped)
		if c.packets > 0 && res.Packets != int64(len(agents))*c.packets {
			t.Errorf("%s: %d packets, want %d", c.name, res.Packets, int64(len(agents))*c.packets)
		}
		if share >= c.share || res.FilesScanned != 0 {
			t.Errorf("%s: read %.2f%% of the bytes, want under %.0f%%; %+v", c.name, 100*share, 100*c.share, res)
		}
		if strings.Contains(res.String(), "bytes read") == false {
			t.Errorf("summary %q", res)
		}
		_ = index.DefaultBlockBytes
	}
	for _, a := range agents {
		var own int64
		files, _ := filepath.Glob(filepath.Join(dir, a.name, "*"))
		for _, f := range files {
			st, _ := os.Stat(f)
			own += st.Size()
		}
		cfg := Config{Dir: dir, Agents: []string{a.name}, Filter: "ip host 10.9.9.7"}
		out, res, err := runQuery(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.NoIndex = true
		scan, _, err := runQuery(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		share := float64(res.BytesRead) / float64(own)
		t.Logf("needle in %s: %d packets, %d of %d bytes read (%.2f%%)", a.name, res.Packets, res.BytesRead, own, 100*share)
		if share >= 0.02 || res.Packets != 40 || !bytes.Equal(out, scan) {
			t.Errorf("needle in %s: read %.2f%% of the bytes, want under 2%%; %d packets, want 40; same as a scan: %v", a.name, 100*share, res.Packets, bytes.Equal(out, scan))
		}
	}
}
