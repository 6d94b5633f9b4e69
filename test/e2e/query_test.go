//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// qpkt is a packet as the comparison sees it.
type qpkt struct {
	ts    int64
	iface string
	orig  uint32
	data  string
}

// readQPkts reads a pcapng (or pcap) file for the comparison.
func readQPkts(t *testing.T, path string) []qpkt {
	t.Helper()
	pkts, ifs := readAll(t, path)
	out := make([]qpkt, len(pkts))
	for i, p := range pkts {
		out[i] = qpkt{p.Timestamp, ifs[p.Interface].Name, p.OrigLen, string(p.Data)}
	}
	return out
}

// epoch is ns as tshark's frame.time_epoch and query's Unix seconds
// write it.
func epoch(ns int64) string { return fmt.Sprintf("%d.%09d", ns/1e9, ns%1e9) }

// liveMarker scans the files of agent dir for packets holding marker
// and returns the timestamp of the first and how many there are; a
// torn tail of a file being written ends its scan quietly.
func liveMarker(dir, marker string) (first int64, n int) {
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	for _, f := range files {
		rc, err := pcapfile.Open(f)
		if err != nil {
			continue
		}
		r, err := pcapfile.NewReader(rc, nil)
		for err == nil {
			var p pcapfile.Packet
			if err = r.ReadInto(&p); err == nil && bytes.Contains(p.Data, []byte(marker)) {
				if n == 0 {
					first = p.Timestamp
				}
				n++
			}
		}
		rc.Close()
	}
	return first, n
}

// TestQueryMatchesMergecap: pcapsync query over three agents' files
// (gzip and zstd replays with rotation, and a live agent still
// connected, whose file is a .part) returns exactly what mergecap and
// tshark -Y with the same time range and filter return: same packets,
// bytes, nanosecond timestamps and interface names, in the same order.
func TestQueryMatchesMergecap(t *testing.T) {
	requireRoot(t) // the live agent captures on lo
	requireTools(t, "tshark", "capinfos", "mergecap")
	ctx := testContext(t)
	in, dir, work := t.TempDir(), t.TempDir(), t.TempDir()
	now := time.Now().UnixNano()
	replays := []struct {
		name, codec, ext string
		start            int64
	}{
		{"qa", "gzip", ".pcapng.gz", now - 4e9},
		{"qb", "zstd", ".pcapng.zst", now - 1e9 + 777},
	}
	const count = 10000
	for i, r := range replays {
		file := filepath.Join(in, r.name+".pcap")
		writeGenFile(t, file, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(31 + i), Seed: uint64(31 + i), Nanosecond: true, Start: r.start})
		addr := freeport.Addr(t)
		coll := startCollector(t, ctx, "", addr, dir, "--file-compress", r.codec, "--rotate-size", "64K")
		finishReplay(t, startReplay(t, ctx, addr, r.name, file, "--batch-size", "32K"), count, 30*time.Second)
		waitNoPart(t, dir, 5*time.Second)
		coll.stop(20 * time.Second)
		if files, _ := filepath.Glob(filepath.Join(dir, r.name, "*"+r.ext)); len(files) < 3 {
			t.Fatalf("%s: %d %s files, want rotation", r.name, len(files), r.ext)
		}
	}

	// The live agent: plain files, still connected while queried.
	addr := freeport.Addr(t)
	liveColl := startCollector(t, ctx, "", addr, dir)
	port := freeport.Port(t) // a UDP port nobody listens on (the test sends to it)
	startProc(t, ctx, "agent qc", "", "agent", "--collector", addr, "--name", "qc", "-i", "lo", fmt.Sprintf("udp dst port %d", port))
	liveColl.waitSessions(1, 10*time.Second) // the agent opens its capture before it connects
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for i := range 300 {
		msg := fmt.Sprintf("pcapsync query e2e %d %s", i, strings.Repeat("x", i*3%1200))
		conn.Write([]byte(msg))
	}
	// Everything sent before the marker is in the files once the
	// marker is: captured in order, committed in order. Markers go out
	// at most every 100 ms until one is in; then the test waits for
	// every marker sent, so that the file being written no longer
	// changes while the reference and the queries read it.
	var mark int64
	var sent int
	var last time.Time
	testutil.Eventually(t, 10*time.Second, func() error {
		first, n := liveMarker(filepath.Join(dir, "qc"), "marker")
		switch {
		case n > 0 && n == sent:
			mark = first
			return nil
		case n == 0 && time.Since(last) >= 100*time.Millisecond:
			conn.Write([]byte("pcapsync query e2e marker"))
			sent, last = sent+1, time.Now()
		}
		return fmt.Errorf("%d of %d markers in qc's files", n, sent)
	})
	parts, _ := filepath.Glob(filepath.Join(dir, "qc", "*.pcapng.part"))
	if len(parts) != 1 {
		t.Fatalf("qc: .part files %q, want 1 being written", parts)
	}

	// The reference: every file, merged by mergecap.
	var files []string
	for _, a := range []string{"qa", "qb", "qc"} {
		names := dirEntries(t, filepath.Join(dir, a)) // data files, not their indexes
		slices.Sort(names)
		for _, n := range names {
			files = append(files, filepath.Join(dir, a, n))
		}
	}
	merged := filepath.Join(work, "merged.pcapng")
	runTool(t, "mergecap", append([]string{"-F", "pcapng", "-w", merged}, files...)...)

	a0, b0 := replays[0].start, replays[1].start
	// Bounds on packets' exact times: the first is in, the last out.
	// Bounds before the marker: the live agent's file may grow after it
	// (markers sent while the test waited for the first).
	all := slices.DeleteFunc(readQPkts(t, merged), func(p qpkt) bool { return p.ts >= mark })
	slices.SortStableFunc(all, func(a, b qpkt) int { return int(min(max(a.ts-b.ts, -1), 1)) })
	edge0, edge1 := all[len(all)/3].ts, all[len(all)/2].ts
	for _, c := range []struct {
		name         string
		since, until int64
		args         []string // query's selection
		display      string   // the same for tshark -Y
	}{
		{"inside a file", a0 + 1e9, a0 + 1e9 + 30e6, []string{"--agent", "qa"}, `frame.interface_name contains "qa:"`},
		{"across rotation", a0 + 5e8, a0 + 4e9, []string{"--agent", "q[a]"}, `frame.interface_name contains "qa:"`},
		{"across agents and the part", b0 - 1e9, mark, nil, ""},
		{"exact edges", edge0, edge1, nil, ""},
		{"filter", b0 - 1e9, mark, []string{"ip[5] & 3 = 1 or udp[8:4] = 0x70636170"}, `(ip.id & 3 == 1) or frame[42:4] == 70:63:61:70`},
		{"interface", a0, mark, []string{"--iface", "*:lo"}, `frame.interface_name == "qc:lo"`},
		{"count", b0, mark, []string{"--count", "100"}, ""},
		{"empty", mark + 3600e9, mark + 3601e9, nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			code := 0
			if c.name == "empty" { // after everything kept: nothing to answer from
				code = 3
			}
			out, ref, got, want := queryAndReference(t, ctx, dir, merged, work, c.name, c.since, c.until, c.args, c.display, code)
			if c.name == "count" {
				want = want[:min(100, len(want))]
			}
			if c.name == "exact edges" && (len(want) == 0 || want[0].ts != edge0 || want[len(want)-1].ts == edge1) {
				t.Fatalf("the reference does not start at the lower bound (or ends at the upper one)")
			}
			if len(want) == 0 && c.name != "empty" {
				t.Fatal("the reference selects nothing: the case tests nothing")
			}
			compareQuery(t, got, want)
			ifaces := map[string]int{}
			for _, p := range got {
				ifaces[p.iface]++
			}
			t.Logf("%d packets, per interface %v", len(got), ifaces)
			// tshark reads the same interface names from both.
			names := func(p string) string {
				return runTool(t, "tshark", "-r", p, "-T", "fields", "-e", "frame.interface_name", "-e", "frame.time_epoch")
			}
			if c.name != "count" && names(out) != names(ref) {
				t.Errorf("tshark's interface names and times differ between the query's output and the reference")
			}
			if c.name == "empty" {
				if s := runTool(t, "capinfos", "-c", out); !strings.Contains(s, "Number of packets:   0") {
					t.Errorf("capinfos on the empty result:\n%s", s)
				}
			}
		})
	}
}

func compareQuery(t *testing.T, got, want []qpkt) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("query wrote %d packets, the reference has %d", len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			g, w := got[i], want[i]
			t.Fatalf("packet %d: query ts %d on %s (orig %d, %d bytes); reference ts %d on %s (orig %d, %d bytes)",
				i, g.ts, g.iface, g.orig, len(g.data), w.ts, w.iface, w.orig, len(w.data))
		}
	}
}

// queryAndReference runs pcapsync query over dir for [since, until)
// with args, and tshark over merged (mergecap of the same files) with
// the same range and the display filter display (a tshark filter
// equivalent to the query's), expecting exit status wantCode, and returns both files and their packets; the reference
// in timestamp order (stable), as the query promises: mergecap takes
// every input to be in order, and a live capture is, to the ns, only
// nearly.
func queryAndReference(t *testing.T, ctx context.Context, dir, merged, work, name string, since, until int64, args []string, display string, wantCode int) (out, ref string, got, want []qpkt) {
	t.Helper()
	out = filepath.Join(work, strings.ReplaceAll(name, " ", "_")+".pcapng")
	q := startProc(t, ctx, "query", "", append([]string{"query", "--dir", dir, "-w", out,
		"--since", epoch(since), "--until", epoch(until)}, args...)...)
	if code := q.wait(20 * time.Second); code != wantCode {
		t.Fatalf("query exited with %d, want %d", code, wantCode)
	}
	ref = filepath.Join(work, "ref.pcapng")
	y := fmt.Sprintf("frame.time_epoch >= %s && frame.time_epoch < %s", epoch(since), epoch(until))
	if display != "" {
		y += " && (" + display + ")"
	}
	runTool(t, "tshark", "-r", merged, "-Y", y, "-w", ref)
	got, want = readQPkts(t, out), readQPkts(t, ref)
	slices.SortStableFunc(want, func(a, b qpkt) int { return int(min(max(a.ts-b.ts, -1), 1)) })
	return out, ref, got, want
}
