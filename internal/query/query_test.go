package query

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin wherever the tests run
	"unicode/utf8"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{"2026-11-24T10:02:00Z", time.Date(2026, 11, 24, 10, 2, 0, 0, time.UTC), false},
		{"2026-11-24T10:02:00.123456789Z", time.Date(2026, 11, 24, 10, 2, 0, 123456789, time.UTC), false},
		{"2026-11-24T11:02:00.5+01:00", time.Date(2026, 11, 24, 10, 2, 0, 5e8, time.UTC), false},
		{"10m", now.Add(-10 * time.Minute), false},
		{"1h30m", now.Add(-90 * time.Minute), false},
		{"0s", now, false},
		{"1732442520", time.Unix(1732442520, 0), false},
		{"1732442520.5", time.Unix(1732442520, 5e8), false},
		{"1732442520.000000001", time.Unix(1732442520, 1), false},
		{"1732442520.123456789", time.Unix(1732442520, 123456789), false},
		{"1732442520.1234567891", time.Time{}, true}, // beyond ns
		{"-10m", time.Time{}, true},
		{"", time.Time{}, true},
		{"yesterday", time.Time{}, true},
		{"2026-11-24 10:02:00", time.Time{}, true},
		{"2026-11-24T10:02:00", time.Time{}, true}, // no zone
		{"1732442520.", time.Time{}, true},
		{"+1732442520", time.Time{}, true},
		{"99999999999999999999", time.Time{}, true},
		// Beyond int64 nanoseconds: refused, never wrapped around.
		{"2300-01-01T00:00:00Z", time.Time{}, true},
		{"2262-04-12T00:00:00Z", time.Time{}, true},
		{"1677-09-21T00:12:43.145224191Z", time.Time{}, true},
		{"1600-01-01T00:00:00Z", time.Time{}, true},
		{"0001-01-01T00:00:00Z", time.Time{}, true},
		{"9223372037", time.Time{}, true},
		{"9223372036.854775808", time.Time{}, true},
		{"9223372036.854775807", time.Unix(0, math.MaxInt64), false},
		{"2262-04-11T23:47:16.854775807Z", time.Unix(0, math.MaxInt64), false},
		{"1677-09-21T00:12:43.145224192Z", time.Unix(0, math.MinInt64), false},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseTime(c.in, now)
			if c.err {
				if !errors.Is(err, ErrBadTime) || !got.IsZero() {
					t.Fatalf("ParseTime(%q) = %v, %v; want ErrBadTime", c.in, got, err)
				}
				return
			}
			if err != nil || !got.Equal(c.want) {
				t.Fatalf("ParseTime(%q) = %v, %v; want %v", c.in, got, err, c.want)
			}
		})
	}
}

func TestSelectionGlobs(t *testing.T) {
	for _, c := range []struct {
		agents, ifaces []string
		agent, iface   string
		wantA, wantI   bool
	}{
		{nil, nil, "web1", "web1:eth0", true, true},
		{[]string{"web*"}, nil, "web1", "web1:eth0", true, true},
		{[]string{"web*"}, nil, "db1", "db1:eth0", false, true},
		{[]string{"db1", "web2"}, nil, "web2", "web2:eth0", true, true},
		{nil, []string{"web1:eth0"}, "web1", "web1:eth0", true, true},
		{nil, []string{"web1:eth0"}, "web1", "web1:eth1", true, false},
		{nil, []string{"web1:eth0"}, "db1", "db1:eth0", false, false},
		{nil, []string{"eth1"}, "db1", "db1:eth1", true, true},
		{nil, []string{"eth1"}, "db1", "db1:eth0", true, false},
		{nil, []string{"*:eth[01]"}, "db1", "db1:eth1", true, true},
		{nil, []string{"web?:*"}, "web12", "web12:eth0", false, false},
	} {
		q := &query{cfg: Config{Agents: c.agents, Ifaces: c.ifaces}}
		if got := q.agentSelected(c.agent); got != c.wantA {
			t.Errorf("agents %q ifaces %q: agent %s selected = %v", c.agents, c.ifaces, c.agent, got)
		}
		if got := q.ifaceSelected(c.iface); got != c.wantI {
			t.Errorf("ifaces %q: interface %s selected = %v", c.ifaces, c.iface, got)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no output root"},
		{Config{Dir: dir, Filter: strings.Repeat("port 1 or ", 48) + "port 2"}, "filter: filter beyond the limits: 49 terms (primitives joined by and/or), at most 48"},
		{Config{Dir: dir, Filter: "udp or " + strings.Repeat(" ", 4096)}, "filter: filter beyond the limits: 4103 bytes, at most 4096"},
		{Config{Dir: dir, Agents: []string{"[a"}}, "agent pattern"},
		{Config{Dir: dir, Ifaces: []string{"a:[x"}}, "interface pattern"},
		{Config{Dir: dir, Since: ts(10), Until: ts(10)}, "empty time range"},
		{Config{Dir: dir, Since: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, "since: bad time: 2300-01-01T00:00:00Z is out of range: want a time from 1677-09-21T00:12:43.145224192Z to 2262-04-11T23:47:16.854775807Z"},
		{Config{Dir: dir, Until: time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC)}, "until: bad time: 2262-04-12T00:00:00Z is out of range"},
		{Config{Dir: dir, Since: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)}, "since: bad time: 1600-01-01T00:00:00Z is out of range"},
		{Config{Dir: dir, Filter: "udp\x00 and garbage"}, "a NUL byte at offset 3"},
		{Config{Dir: dir, Filter: "\x00"}, "a NUL byte at offset 0"},
		{Config{Dir: dir, Count: -1}, "count"},
		{Config{Dir: dir, MaxBytes: -1}, "max bytes"},
		{Config{Dir: filepath.Join(dir, "nope")}, "no such file"},
		{Config{Dir: file}, "is not a directory"},
	} {
		_, _, err := runQuery(t, c.cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: err %v, want %q", c.cfg, err, c.want)
		}
		if verr := c.cfg.Validate(); verr == nil || verr.Error() != err.Error() {
			t.Errorf("%+v: Validate says %v, Run %v: want Run to refuse what Validate does", c.cfg, verr, err)
		}
	}
	bad := Config{Dir: dir, Filter: "udp port 99999"}
	if _, err := Prepare(context.Background(), bad); !errors.Is(err, ErrBadFilter) || !strings.Contains(err.Error(), "filter: ") {
		t.Errorf("a filter that does not compile: Prepare says %v, want ErrBadFilter", err)
	}
	if err := (&Config{Dir: filepath.Join(dir, "nope")}).Validate(); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing root: Validate says %v, want an error wrapping fs.ErrNotExist", err)
	}
}

// interleaved is batches alternating between eth0 and eth1 whose times
// overlap (as an agent with two interfaces writes them): every 10 µs a
// packet on each, eth1's batches written after eth0's later ones.
func interleaved(start, n int64, port func(i int64) uint16) [][]tp {
	var out [][]tp
	for b := range n {
		var e0, e1 []tp
		for i := range int64(8) {
			k := b*8 + i
			e0 = append(e0, tp{ts: start + k*10_000, iface: 0, port: port(k)})
			e1 = append(e1, tp{ts: start + k*10_000 - 15_000, iface: 1, port: port(k + 1)})
		}
		out = append(out, e0, e1)
	}
	return out
}

// threeAgents writes a1 (plain, rotating), b2 (gzip, rotating), c3
// (zstd, still open); their times overlap.
func threeAgents(t *testing.T) (string, []ref) {
	t.Helper()
	dir := t.TempDir()
	port := func(i int64) uint16 { return uint16(5000 + i%4) }
	var refs []ref
	for i, a := range []agentSpec{
		{name: "a1", rotate: 4096, batches: interleaved(0, 20, port), stats: true},
		{name: "b2", comp: "gzip", rotate: 4096, batches: interleaved(3_333, 20, port), stats: true},
		{name: "c3", comp: "zstd", batches: interleaved(7_777, 20, port), open: true},
	} {
		refs = append(refs, writeAgent(t, dir, a, i)...)
	}
	return dir, refs
}

func TestQuery(t *testing.T) {
	dir, refs := threeAgents(t)
	for _, a := range []string{"a1", "b2"} {
		if n, _ := filepath.Glob(filepath.Join(dir, a, "*.pcapng*")); len(n) < 3 {
			t.Fatalf("%s: %d files, want rotation", a, len(n))
		}
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "c3", "*.part")); len(n) != 1 {
		t.Fatalf("c3: %d .part files, want 1", len(n))
	}
	all := int64(math.MaxInt64 - base)
	inFile := func(r ref) bool { return true }
	for _, c := range []struct {
		name         string
		cfg          Config
		since, until int64
		keep         func(ref) bool
		count        int
	}{
		{name: "all", since: -1e9, until: all},
		{name: "inside a file", cfg: Config{Agents: []string{"a1"}}, since: 100_000, until: 150_000, keep: func(r ref) bool { return r.agent == "a1" }},
		{name: "across files and agents", since: 200_000, until: 1_200_000},
		{name: "exact edges", since: 320_000, until: 320_000 + 3_333 + 1, keep: inFile},
		{name: "part only", cfg: Config{Agents: []string{"c*"}}, since: 500_000, until: 900_000, keep: func(r ref) bool { return r.agent == "c3" }},
		{name: "interface by agent", cfg: Config{Ifaces: []string{"b2:eth1"}}, since: 0, until: all, keep: func(r ref) bool { return r.Iface == "b2:eth1" }},
		{name: "interface everywhere", cfg: Config{Ifaces: []string{"eth0"}}, since: 0, until: all, keep: func(r ref) bool { return strings.HasSuffix(r.Iface, ":eth0") }},
		{name: "filter", cfg: Config{Filter: "udp dst port 5002"}, since: 150_000, until: 1_000_000, keep: func(r ref) bool { return r.port == 5002 }},
		{name: "count", cfg: Config{Count: 17}, since: 400_000, until: all, count: 17},
		{name: "empty", since: 5e9, until: 6e9},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Dir, cfg.Since, cfg.Until = dir, ts(c.since), ts(c.until)
			if c.until == all {
				cfg.Until = time.Time{}
			}
			out, res, err := runQuery(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			want := expect(refs, c.since, c.until, c.keep)
			if c.count > 0 {
				want = want[:c.count]
				if res.Stopped != "count" {
					t.Errorf("stopped %q, want count", res.Stopped)
				}
			}
			pkts, ifaces, _ := readOutput(t, out)
			comparePackets(t, pkts, want)
			if res.Packets != int64(len(want)) || res.Bytes != int64(len(out)) {
				t.Errorf("result %+v; %d packets, %d bytes written", res, len(want), len(out))
			}
			checkIfaces(t, ifaces, pkts)
		})
	}
}

// checkIfaces: one block per interface used, named as in the files.
func checkIfaces(t *testing.T, ifaces []pcapfile.Interface, pkts []got) {
	t.Helper()
	used := map[string]bool{}
	for _, p := range pkts {
		used[p.Iface] = true
	}
	var names []string
	for _, ifc := range ifaces {
		names = append(names, ifc.Name)
		if ifc.LinkType != 1 || ifc.SnapLen != 65535 {
			t.Errorf("interface %+v", ifc)
		}
	}
	slices.Sort(names)
	if len(slices.Compact(slices.Clone(names))) != len(names) || len(names) != len(used) {
		t.Errorf("interfaces %q for packets on %v", names, used)
	}
}

func comparePackets(t *testing.T, gotP []got, want []got) {
	t.Helper()
	if len(gotP) != len(want) {
		t.Errorf("%d packets, want %d", len(gotP), len(want))
	}
	for i := range min(len(gotP), len(want)) {
		g, w := gotP[i], want[i]
		if g.TS != w.TS || g.Iface != w.Iface || g.Orig != w.Orig || string(g.Data) != string(w.Data) {
			t.Fatalf("packet %d: got ts %d on %s (orig %d, %d bytes), want ts %d on %s (orig %d, %d bytes)",
				i, g.TS-base, g.Iface, g.Orig, len(g.Data), w.TS-base, w.Iface, w.Orig, len(w.Data))
		}
	}
}

func TestMaxBytes(t *testing.T) {
	dir, refs := threeAgents(t)
	full, _, err := runQuery(t, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	// The section header (its comment says the query and its coverage)
	// and a little more: room for a packet or two.
	head := int64(binary.LittleEndian.Uint32(full[4:]))
	for _, limit := range []int64{head + 80, 1000, 4321, int64(len(full)) / 2} {
		out, res, err := runQuery(t, Config{Dir: dir, MaxBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(out)) > limit || res.Stopped != "max-bytes" {
			t.Fatalf("limit %d: %d bytes written, stopped %q", limit, len(out), res.Stopped)
		}
		pkts, _, _ := readOutput(t, out)
		want := expect(refs, math.MinInt64/2, math.MaxInt64-base, nil)
		comparePackets(t, pkts, want[:len(pkts)])
		// The next packet would not have fitted.
		next := want[len(pkts)]
		if int64(len(out))+32+int64(len(next.Data)+3)/4*4 <= limit {
			t.Errorf("limit %d: stopped at %d bytes before a packet that fits", limit, len(out))
		}
	}
}

// TestPartUpToLastBatch: a .part whose last batch is incomplete (its
// packets written, its mark not) is read up to the batch before.
func TestPartUpToLastBatch(t *testing.T) {
	src := t.TempDir()
	refs := writeAgent(t, src, agentSpec{name: "p1", batches: [][]tp{
		{{ts: 0}, {ts: 10}, {ts: 20}}, {{ts: 30}, {ts: 40}}, {{ts: 50}, {ts: 60}, {ts: 70}}}}, 0)
	file := onlyFile(t, src, "p1", "*.pcapng")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Cut the file after the second packet of the last batch: whole
	// blocks, but no mark for the batch. Its EPBs end at known offsets:
	// find them from the end (the last EPB carries the mark option).
	ends := epbEnds(t, b)
	cut := ends[len(ends)-2] // after packet 60, before the marked 70
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "p1"), 0o750)
	os.WriteFile(filepath.Join(dir, "p1", filepath.Base(file)+layout.PartSuffix), b[:cut], 0o640)
	out, res, err := runQuery(t, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pkts, _, _ := readOutput(t, out)
	comparePackets(t, pkts, expect(refs[:5], 0, 1e9, nil))
	if res.FilesRead != 1 {
		t.Errorf("result %+v", res)
	}
}

// epbEnds returns the end offset of every enhanced packet block of a
// plain pcapng file.
func epbEnds(t *testing.T, b []byte) []int {
	t.Helper()
	var ends []int
	for off := 0; off+8 <= len(b); {
		typ := uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16 | uint32(b[off+3])<<24
		l := int(uint32(b[off+4]) | uint32(b[off+5])<<8 | uint32(b[off+6])<<16 | uint32(b[off+7])<<24)
		off += l
		if typ == 6 {
			ends = append(ends, off)
		}
	}
	return ends
}

// TestIndexTimes: a closed file the retention index lists with its
// size is skipped when its times are outside the range (the index is
// trusted: the test makes it lie to see it); listed with another size,
// it is read.
func TestIndexTimes(t *testing.T) {
	dir := t.TempDir()
	refs := writeAgent(t, dir, agentSpec{name: "x1", rotate: 4096, batches: interleaved(0, 10, func(int64) uint16 { return 1 })}, 0)
	files, _ := filepath.Glob(filepath.Join(dir, "x1", "*.pcapng"))
	if len(files) < 2 {
		t.Fatalf("%d files", len(files))
	}
	st, _ := os.Stat(files[0])
	size := st.Size() // retention counts a file with its index sidecar
	if ist, err := os.Stat(index.Path(files[0])); err == nil {
		size += ist.Size()
	}
	mod := st.ModTime().UnixNano()
	writeIndex := func(size, mod int64) {
		t.Helper()
		doc := map[string]any{"version": 1, "files": []map[string]any{
			{"name": filepath.Base(files[0]), "bytes": size, "mod": mod, "first": base + 5e9, "last": base + 6e9}}}
		b, _ := json.Marshal(doc)
		os.MkdirAll(filepath.Join(dir, layout.RetainDir), 0o750)
		if err := os.WriteFile(filepath.Join(dir, layout.RetainDir, "x1.json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	first := filepath.Base(files[0])
	inFirst := func(r ref) bool { return false }
	_ = inFirst
	for _, c := range []struct {
		name      string
		size, mod int64
		skipped   int
	}{
		{"trusted", size, mod, 1},
		{"other size", size + 1, mod, 0},
		{"other modification time", size, mod + 1, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			writeIndex(c.size, c.mod)
			out, res, err := runQuery(t, Config{Dir: dir, Until: ts(1e9)})
			if err != nil {
				t.Fatal(err)
			}
			if res.FilesSkipped != c.skipped || res.FilesRead != len(files)-c.skipped {
				t.Fatalf("result %+v, %d files", res, len(files))
			}
			pkts, _, _ := readOutput(t, out)
			want := expect(refs, -1e9, 1e9, nil)
			if c.skipped == 1 {
				inFile := map[string]bool{}
				for _, p := range readFileRefs(t, files[0]) {
					inFile[string(p)] = true
				}
				want = slices.DeleteFunc(want, func(g got) bool { return inFile[string(g.Data)] })
				if len(want) == 0 {
					t.Fatal("nothing left")
				}
			}
			comparePackets(t, pkts, want)
			_ = first
		})
	}
}

func readFileRefs(t *testing.T, path string) [][]byte {
	t.Helper()
	dir := t.TempDir()
	agent := filepath.Base(filepath.Dir(path)) // a query reads the files named after their agent only
	os.MkdirAll(filepath.Join(dir, agent), 0o750)
	b, _ := os.ReadFile(path)
	os.WriteFile(filepath.Join(dir, agent, filepath.Base(path)), b, 0o640)
	out, _, err := runQuery(t, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	pkts, _, _ := readOutput(t, out)
	var d [][]byte
	for _, p := range pkts {
		d = append(d, p.Data)
	}
	return d
}

// TestFileRemoved: a file removed once it is open is still read whole
// (the descriptor keeps it); one removed before the query reached it
// fails the query with ErrFileGone naming it, the output still a valid
// pcapng of what was written before.
func TestFileRemoved(t *testing.T) {
	for _, c := range []struct {
		name   string
		remove int // index of the file removed when the first one is opened
		gone   bool
	}{
		{"open file", 0, false},
		{"next file", 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			refs := writeAgent(t, dir, agentSpec{name: "g1", comp: "gzip", rotate: 4096, batches: interleaved(0, 10, func(int64) uint16 { return 1 })}, 0)
			files, _ := filepath.Glob(filepath.Join(dir, "g1", "*.pcapng.gz"))
			if len(files) < 3 {
				t.Fatalf("%d files", len(files))
			}
			testOpened = func(path string) {
				if path == files[0] {
					os.Remove(files[c.remove])
				}
			}
			t.Cleanup(func() { testOpened = nil })
			out, res, err := runQuery(t, Config{Dir: dir})
			pkts, _, _ := readOutput(t, out)
			if res.Packets != int64(len(pkts)) {
				t.Errorf("result %+v, %d packets in the output", res, len(pkts))
			}
			want := expect(refs, -1e9, 1e9, nil)
			if !c.gone {
				if err != nil {
					t.Fatal(err)
				}
				comparePackets(t, pkts, want)
				return
			}
			if !errors.Is(err, ErrFileGone) || !strings.Contains(err.Error(), filepath.Base(files[c.remove])) {
				t.Fatalf("err %v, want ErrFileGone naming %s", err, files[c.remove])
			}
			comparePackets(t, pkts, want[:len(pkts)])
		})
	}
}

// TestReorderWindow: an agent's files out of order by more than the
// window fail with ErrOutOfOrder; a window that holds the disorder
// sorts it exactly.
func TestReorderWindow(t *testing.T) {
	dir := t.TempDir()
	// Batch 2 holds packets 2 ms older than all of batch 1.
	var b1, b2 []tp
	for i := range int64(3000) {
		b1 = append(b1, tp{ts: 2_000_000 + i*10, port: 1})
	}
	for i := range int64(100) {
		b2 = append(b2, tp{ts: i * 10, iface: 1, port: 1})
	}
	refs := writeAgent(t, dir, agentSpec{name: "o1", batches: [][]tp{b1, b2}}, 0)
	_, _, err := runQuery(t, Config{Dir: dir, ReorderMem: 1})
	if !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("small window: err %v, want ErrOutOfOrder", err)
	}
	out, _, err := runQuery(t, Config{Dir: dir, ReorderMem: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	pkts, _, _ := readOutput(t, out)
	comparePackets(t, pkts, expect(refs, -1, 1e9, nil))
}

// TestScanSameAsIndexWhenDisordered: a file whose packets go back in
// time by more than the reorder window gives the same packets read
// through its index, with --no-index and without an index: those
// before --until that follow a window's worth after it are read all
// the same (never a silent 0); disorder the window cannot hold inside
// the range fails with ErrOutOfOrder in every mode.
func TestScanSameAsIndexWhenDisordered(t *testing.T) {
	var late, old []tp
	for i := range int64(3000) {
		late = append(late, tp{ts: 2_000_000 + i*10, port: 1})
	}
	for i := range int64(300) {
		old = append(old, tp{ts: i * 10, iface: 1, port: 1})
	}
	for _, c := range []struct {
		name         string
		since, until int64 // 0: none
		filter       string
		mem          int64
		want         int // packets; -1: ErrOutOfOrder
	}{
		{name: "old ones before until", until: 1_000_000, mem: 1, want: 300},
		{name: "old ones before until, filtered", until: 1_000_000, filter: "udp port 1", mem: 1, want: 300},
		{name: "late ones after since", since: 1_000_000, mem: 1, want: 3000},
		{name: "window holds all", mem: 4 << 20, want: 3300},
		{name: "window too small", mem: 1, want: -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			refs := writeAgent(t, dir, agentSpec{name: "o1", ixBlock: 4096, batches: [][]tp{late, old}}, 0)
			cfg := Config{Dir: dir, ReorderMem: c.mem, Filter: c.filter}
			if c.since != 0 {
				cfg.Since = ts(c.since)
			}
			if c.until != 0 {
				cfg.Until = ts(c.until)
			}
			var outs [][]byte
			for _, mode := range []string{"index", "no-index", "index removed"} {
				cfg.NoIndex = mode == "no-index"
				if mode == "index removed" {
					idx, _ := filepath.Glob(filepath.Join(dir, "o1", "*.idx"))
					if len(idx) == 0 {
						t.Fatal("no index written")
					}
					for _, f := range idx {
						os.Remove(f)
					}
				}
				out, res, err := runQuery(t, cfg)
				if c.want < 0 {
					if !errors.Is(err, ErrOutOfOrder) || !strings.Contains(err.Error(), "--reorder-mem") {
						t.Fatalf("%s: err %v, want ErrOutOfOrder naming --reorder-mem", mode, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", mode, err)
				}
				pkts, _, _ := readOutput(t, out)
				if len(pkts) != c.want {
					t.Fatalf("%s: %d packets (%s), want %d", mode, len(pkts), res, c.want)
				}
				until := int64(math.MaxInt64 - base)
				if c.until != 0 {
					until = c.until
				}
				comparePackets(t, pkts, expect(refs, c.since, until, nil))
				outs = append(outs, out)
			}
			for i := 1; i < len(outs); i++ {
				if !slices.Equal(withoutComments(t, outs[0]), withoutComments(t, outs[i])) {
					t.Errorf("mode %d wrote other bytes than through the index", i)
				}
			}
		})
	}
}

// TestStatsCarried: the statistics blocks of the closed files read are
// written after the packets, for the interfaces selected.
func TestStatsCarried(t *testing.T) {
	dir, _ := threeAgents(t)
	out, _, err := runQuery(t, Config{Dir: dir, Ifaces: []string{"eth0"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, stats := readOutput(t, out)
	var a1, b2 int
	for _, st := range stats {
		if !st.HaveOsDrop || !st.HaveIfRecv || !strings.HasPrefix(st.Comment, "from ") {
			t.Errorf("stats %+v", st)
		}
		switch {
		case strings.Contains(st.Comment, "from a1_"):
			a1++
		case strings.Contains(st.Comment, "from b2_"):
			b2++
		}
	}
	files := func(a string) int { // data files, closed or not; not their indexes
		n := 0
		for _, pat := range []string{"*.pcapng", "*.pcapng.gz", "*.pcapng.zst", "*.pcapng*.part"} {
			m, _ := filepath.Glob(filepath.Join(dir, a, pat))
			for _, f := range m {
				if !strings.Contains(filepath.Base(f), ".idx") {
					n++
				}
			}
		}
		return n
	}
	if a1 != files("a1") || b2 != files("b2") || len(stats) != a1+b2 {
		t.Errorf("%d statistics blocks (a1 %d, b2 %d); files a1 %d, b2 %d", len(stats), a1, b2, files("a1"), files("b2"))
	}
}

// TestPartPublished: a .part renamed (closed) after the listing is read
// under its final name, whole.
func TestPartPublished(t *testing.T) {
	dir := t.TempDir()
	refs := writeAgent(t, dir, agentSpec{name: "r1", comp: "zstd", batches: [][]tp{{{ts: 1}, {ts: 2}}, {{ts: 3}}}}, 0)
	fi := layout.FileInfo{Path: onlyFile(t, dir, "r1", "*.pcapng.zst") + layout.PartSuffix, Part: true}
	src, err := openFile(context.Background(), fi, new(kit), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.close()
	var n int
	var p pcapfile.Packet
	for src.next(&p) == nil {
		n++
	}
	if n != len(refs) {
		t.Errorf("%d packets, want %d", n, len(refs))
	}
}

// TestFilterCompiledOnce: a query compiles its filter once (for the
// Ethernet of its files), not again per check or per agent; Prepare
// refuses a filter beyond the limits before compiling anything.
func TestFilterCompiledOnce(t *testing.T) {
	dir := t.TempDir()
	var pkts []tp
	for i := range 100 {
		pkts = append(pkts, tp{ts: int64(i) * 1000, iface: i % 2, port: uint16(7 + i%3)})
	}
	writeAgent(t, dir, agentSpec{name: "c1", batches: [][]tp{pkts}}, 0)
	writeAgent(t, dir, agentSpec{name: "c2", comp: "gzip", batches: [][]tp{pkts}}, 1)
	before := capture.FilterCompiles()
	_, res, err := runQuery(t, Config{Dir: dir, Filter: "udp dst port 7"})
	if err != nil {
		t.Fatal(err)
	}
	if n := capture.FilterCompiles() - before; n != 1 || res.Packets != 68 {
		t.Errorf("%d compiles, %d packets: want 1 compile and 68 packets", n, res.Packets)
	}
	before = capture.FilterCompiles()
	if _, res, err = runQuery(t, Config{Dir: dir}); err != nil || res.Packets != 200 || capture.FilterCompiles() != before {
		t.Errorf("no filter: %v, %d packets, %d compiles: want 200 packets and no compile", err, res.Packets, capture.FilterCompiles()-before)
	}
	_, err = Prepare(context.Background(), Config{Dir: dir, Filter: strings.Repeat("udp or ", 60) + "tcp"})
	if !errors.Is(err, ErrBadFilter) || !errors.Is(err, capture.ErrFilterLimit) || capture.FilterCompiles() != before {
		t.Errorf("over the limits: %v, %d compiles", err, capture.FilterCompiles()-before)
	}
}

// TestWindowHoldsItsShare: an agent's window, with the buffers it keeps
// for reuse and the heap that orders its packets, stays within its
// share of ReorderMem (but for a packet and a growth of the heap) while
// the packets' sizes change: small, large, small again. Buffers kept
// per size outside the window held twice the share. The same with a
// producer filling the window (its batches in flight are bounded apart).
func TestWindowHoldsItsShare(t *testing.T) {
	dir := t.TempDir()
	var batches [][]tp
	for phase, pad := range []int{0, 1300, 0, 600} {
		var b []tp
		for i := range 3000 {
			b = append(b, tp{ts: int64(phase*3000+i) * 1000, iface: i % 2, port: 1, pad: pad})
		}
		batches = append(batches, b)
	}
	writeAgent(t, dir, agentSpec{name: "w1", batches: batches}, 0)
	var worst, worstLists, worstPinned, limit int64
	miscounted := false
	testTaken = func(s *stream) {
		held := int64(s.h.entries()) * entrySize
		s.h.each(func(p *pkt) { held += classSize(len(p.data)) })
		var lists int64
		for _, l := range s.free {
			lists += int64(cap(l)) * sliceSize
			for _, b := range l {
				held += int64(cap(b))
			}
		}
		if (held != s.mem+s.freeMem || lists != s.listMem) && !miscounted { // the hook may run in a producer's goroutine
			t.Errorf("the window counts %d+%d bytes and %d of lists, holds %d and %d", s.mem, s.freeMem, s.listMem, held, lists)
			miscounted = true
		}
		worst, worstLists, limit = max(worst, held), max(worstLists, lists), s.limit
		worstPinned = max(worstPinned, s.pinned)
	}
	defer func() { testTaken = nil }()
	for _, threads := range []int{1, 2} { // 2: filled by a producer, its batches in flight not counted
		worst, worstLists, worstPinned = 0, 0, 0
		_, res, err := runQuery(t, Config{Dir: dir, ReorderMem: minStreamMem, Threads: threads})
		if err != nil || res.Packets != 12000 {
			t.Fatalf("%d packets, %v", res.Packets, err)
		}
		t.Logf("threads %d: window of %d KiB held at most %d KiB, its free lists' entries %d KiB, the reader's chunks held by packets %d KiB",
			threads, limit>>10, worst>>10, worstLists>>10, worstPinned>>10)
		bound := limit + limit/8 + 2048
		if worst > bound {
			t.Errorf("threads %d: the window held %d bytes, its share is %d", threads, worst, limit)
		}
		// Packets stop being held in the chunks they were read into once
		// those pass half the limit: one chunk more at most.
		if worstPinned > limit/2+pcapfile.ReaderBufferSize {
			t.Errorf("threads %d: packets held %d bytes of chunks, more than half the window's %d and a chunk", threads, worstPinned, limit)
		}
		// An entry for each buffer kept at once (stream.buf), of at
		// least 64 bytes each.
		if worstLists > bound/64*sliceSize {
			t.Errorf("threads %d: the free lists' entries took %d bytes, more than one a buffer", threads, worstLists)
		}
	}
}

// TestLongSelection: 10 000 agent globs (more than the 65535 bytes of
// a pcapng option, which failed the query) run, and the section
// comment recording them is cut to maxDescribe bytes of valid UTF-8,
// the cut said.
func TestLongSelection(t *testing.T) {
	dir, refs := threeAgents(t)
	for _, glob := range []string{"x%04d*", "é%04d"} {
		var agents []string
		for i := range 10_000 {
			agents = append(agents, fmt.Sprintf(glob, i))
		}
		agents = append(agents, "a?")
		cfg := Config{Dir: dir, Agents: agents}
		out, res, err := runQuery(t, cfg)
		if err != nil {
			t.Fatalf("%s: %v", glob, err)
		}
		pkts, _, _ := readOutput(t, out)
		comparePackets(t, pkts, expect(refs, -1e9, math.MaxInt64-base, func(r ref) bool { return r.agent == "a1" }))
		if res.Agents != 1 {
			t.Errorf("%s: %d agents, want 1", glob, res.Agents)
		}
		d := (&query{cfg: cfg}).describe()
		if len(d) > maxDescribe || !utf8.ValidString(d) || !strings.HasSuffix(d, "bytes of the selection left out)") {
			t.Errorf("%s: section comment of %d bytes (valid UTF-8 %v), ending %q", glob, len(d), utf8.ValidString(d), d[max(0, len(d)-60):])
		}
	}
	short := Config{Dir: dir, Agents: []string{"a1"}, Filter: "udp"}
	if d := (&query{cfg: short}).describe(); d != "pcapsync query --agent a1 udp" {
		t.Errorf("short selection described as %q", d)
	}
}

// TestParseTimeIn: dates and times as Wireshark, tcpdump -tttt and
// pcapsync query's lines print them, in a zone given (the system's or
// TZ for the CLI) unless they carry one; times a daylight saving change
// skips or repeats are refused with the offsets to choose from.
func TestParseTimeIn(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		in   string
		loc  *time.Location
		want string // RFC 3339 in UTC; "" an error
		msg  string // in the error
	}{
		{"2026-11-27 09:15:50", berlin, "2026-11-27T08:15:50Z", ""},
		{"2026-11-27 09:15:50.5", berlin, "2026-11-27T08:15:50.5Z", ""},
		{"2026-11-27 09:15:50.123456", berlin, "2026-11-27T08:15:50.123456Z", ""},
		{"2026-11-27 09:15:50.123456789", berlin, "2026-11-27T08:15:50.123456789Z", ""},
		{"  2026-11-27 09:15:50  ", berlin, "2026-11-27T08:15:50Z", ""},
		{"2026-11-27T09:15:50", berlin, "2026-11-27T08:15:50Z", ""},
		{"2026-11-27 09:15", berlin, "2026-11-27T08:15:00Z", ""},
		{"2026-11-27", berlin, "2026-11-26T23:00:00Z", ""},
		{"2026-07-01 12:00:00", berlin, "2026-07-01T10:00:00Z", ""}, // summer time
		{"2026-11-27 09:15:50", time.UTC, "2026-11-27T09:15:50Z", ""},
		{"2026-11-27 09:15:50Z", berlin, "2026-11-27T09:15:50Z", ""},
		{"2026-11-27 09:15:50 UTC", berlin, "2026-11-27T09:15:50Z", ""},
		{"2026-11-27 09:15:50+01:00", time.UTC, "2026-11-27T08:15:50Z", ""},
		{"2026-11-27 09:15:50 +0100", time.UTC, "2026-11-27T08:15:50Z", ""},
		{"2026-11-27T09:15:50.25-05:30", berlin, "2026-11-27T14:45:50.25Z", ""},
		{"2026-11-27t09:15:50z", nil, "2026-11-27T09:15:50Z", ""},
		{"2026-10-25 02:30:00+01:00", berlin, "2026-10-25T01:30:00Z", ""},
		{"2026-10-25 02:30:00+02:00", berlin, "2026-10-25T00:30:00Z", ""},
		{"10m", berlin, "2026-11-27T11:50:00Z", ""},
		{"1732442520.5", berlin, "2024-11-24T10:02:00.5Z", ""},
		// Refused.
		{"2026-11-27 09:15:50", nil, "", "has no zone: add Z or an offset"},
		{"2026-03-29 02:30:00", berlin, "", "does not exist in Europe/Berlin"},
		{"2026-10-25 02:30:00", berlin, "", "is ambiguous in Europe/Berlin: its clocks show it twice; add the offset (+02:00 or +01:00)"},
		{"2026-02-30 10:00:00", berlin, "", "is not a valid date and time"},
		{"2026-11-27 24:00:00", berlin, "", "is not a valid date and time"},
		{"2026-11-27 09:60:00", berlin, "", "is not a valid date and time"},
		{"2026-13-01", berlin, "", "is not a valid date and time"},
		{"2026-11-27 09:15:50+25:00", berlin, "", "bad offset"},
		{"2026-11-27 09:15:50.1234567891", berlin, "", "want a date and time"},
		{"2026-11-27 9:15:50", berlin, "", "want a date and time"},
		{"27.11.2026 09:15:50", berlin, "", "want a date and time"},
		{"2300-01-01 00:00:00", berlin, "", "out of range"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := ParseTimeIn(c.in, now, c.loc)
			if c.want == "" {
				if !errors.Is(err, ErrBadTime) || !strings.Contains(err.Error(), c.msg) || !got.IsZero() {
					t.Fatalf("ParseTimeIn(%q) = %v, %v; want ErrBadTime with %q", c.in, got, err, c.msg)
				}
				return
			}
			if err != nil || !got.Equal(utc(c.want)) {
				t.Fatalf("ParseTimeIn(%q) = %v, %v; want %s", c.in, got, err, c.want)
			}
		})
	}
}

// writeForeign writes, for each agent, a pcapng file the store did not
// write into its directory: one interface named "eth0" (no agent
// prefix), three packets at base+2k+i seconds (i the agent's place),
// of 0, 60 and 0 bytes (60 on the wire).
func writeForeign(t *testing.T, dir string, agents ...string) {
	t.Helper()
	for i, agent := range agents {
		var b bytes.Buffer
		w, err := pcapfile.NewNgWriter(&b, pcapfile.SectionInfo{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.AddInterface(pcapfile.Interface{Name: "eth0", LinkType: 1, SnapLen: 65535}); err != nil {
			t.Fatal(err)
		}
		for k := range 3 {
			data := make([]byte, 60*(k%2)) // empty, 60 bytes, empty
			if err := w.WritePacket(0, base+int64(2*k+i)*1e9, 60, data); err != nil {
				t.Fatal(err)
			}
		}
		os.MkdirAll(filepath.Join(dir, agent), 0o750)
		if err := os.WriteFile(filepath.Join(dir, agent, agent+"_20261128T000000.000Z.pcapng"), b.Bytes(), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// TestEmptyPackets: packets that captured no bytes (caplen 0, which
// pcapng allows) in a file under the root are written as they are, by
// one goroutine and with producers, in the merge's order; a query once
// panicked on them (the window's size class of 0 bytes).
func TestEmptyPackets(t *testing.T) {
	dir := t.TempDir()
	writeForeign(t, dir, "a1", "b1")
	for _, threads := range []int{1, 2} {
		out, res, err := runQuery(t, Config{Dir: dir, Threads: threads})
		if err != nil || res.Packets != 6 {
			t.Fatalf("threads %d: %d packets, %v; want 6", threads, res.Packets, err)
		}
		pkts, _, _ := readOutput(t, out)
		for j, p := range pkts {
			if want := 60 * (j / 2 % 2); p.TS != base+int64(j)*1e9 || len(p.Data) != want || p.Orig != 60 {
				t.Errorf("threads %d: packet %d at %d ns, %d of %d bytes; want %d ns, %d of 60", threads, j, p.TS-base, len(p.Data), p.Orig, int64(j)*1e9, want)
			}
		}
	}
}

// TestForeignInterfaceNames: two agents' files the store did not write,
// each naming its interface "eth0" without the agent's prefix, give two
// interfaces, "a1:eth0" and "b1:eth0", each packet on its agent's (they
// were merged into one, the packets of b1 given to a1); --iface selects
// them as it does the store's.
func TestForeignInterfaceNames(t *testing.T) {
	dir := t.TempDir()
	writeForeign(t, dir, "a1", "b1")
	for _, c := range []struct {
		ifaces []string
		want   []string // each packet's interface, in order
	}{
		{nil, []string{"a1:eth0", "b1:eth0", "a1:eth0", "b1:eth0", "a1:eth0", "b1:eth0"}},
		{[]string{"eth0"}, []string{"a1:eth0", "b1:eth0", "a1:eth0", "b1:eth0", "a1:eth0", "b1:eth0"}},
		{[]string{"b1:eth0"}, []string{"b1:eth0", "b1:eth0", "b1:eth0"}},
	} {
		out, _, err := runQuery(t, Config{Dir: dir, Ifaces: c.ifaces})
		if err != nil {
			t.Fatalf("--iface %v: %v", c.ifaces, err)
		}
		pkts, _, _ := readOutput(t, out)
		var got []string
		for _, p := range pkts {
			got = append(got, p.Iface)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("--iface %v: packets on %q, want %q", c.ifaces, got, c.want)
		}
	}
	prep, err := Prepare(context.Background(), Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	if _, err := prep.RunEach(context.Background(), io.Discard, func(p *Packet) error {
		seen = append(seen, p.Agent+" "+p.Interface.Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a1 a1:eth0", "b1 b1:eth0"}; !slices.Equal(seen[:2], want) {
		t.Errorf("Each gave %q, want %q first", seen, want)
	}
}
