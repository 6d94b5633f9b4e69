//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// writeGenFile writes a generated classic pcap file.
func writeGenFile(t *testing.T, path string, c gen.FileConfig) {
	t.Helper()
	if err := gen.WriteFile(path, c); err != nil {
		t.Fatalf("gen.WriteFile(%s): %v", path, err)
	}
}

// writeTwoLinkPcapng writes a pcapng file with three interfaces of two
// link types: Ethernet "eth-in" (snaplen 65535), raw IPv4 "raw-in"
// (snaplen 200, so its larger packets are cut: OrigLen > captured
// length) and an unnamed Ethernet interface. Packets of stream 13
// alternate between them, with nanosecond timestamps that are neither
// whole microseconds nor in order.
func writeTwoLinkPcapng(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	w, err := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{UserAppl: "pcapsync e2e test"})
	if err != nil {
		t.Fatal(err)
	}
	ifaces := []pcapfile.Interface{
		{Name: "eth-in", LinkType: gen.LinkTypeEthernet, SnapLen: 65535},
		{Name: "raw-in", LinkType: gen.LinkTypeRaw, SnapLen: 200},
		{LinkType: gen.LinkTypeEthernet, SnapLen: 65535},
	}
	for _, ifc := range ifaces {
		if _, err := w.AddInterface(ifc); err != nil {
			t.Fatal(err)
		}
	}
	sizes := []int{64, 333, 1514, 9000, 100}
	buf := make([]byte, 9000)
	ts := int64(1767225600_123456789)
	for i := range uint64(2000) {
		ifx := int(i % 3)
		if i%7 == 6 {
			ifx = 1 // runs of the same interface, too
		}
		size := sizes[i%uint64(len(sizes))]
		frame := gen.Frame(buf[:size], ifaces[ifx].LinkType, 13, i)
		data := frame[:min(len(frame), int(ifaces[ifx].SnapLen))]
		ts += 987_654_321 % (int64(i) + 7) // irregular, nanosecond steps
		if i%50 == 49 {
			ts -= 5_000_000 // out of order
		}
		if err := w.WritePacket(ifx, ts, uint32(len(frame)), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReplayIdentical replays capture files of each format and link
// type and requires the collector's output to hold the same packets in
// the same order: timestamp to the nanosecond, bytes, original length,
// and an interface of the same link type named "<agent>:<interface>".
func TestReplayIdentical(t *testing.T) {
	requireTools(t, checkTools...)
	tests := []struct {
		name     string
		agent    string
		file     string
		compress string // --compress, "" for the default
		files    string // the collector's --file-compress
		write    func(t *testing.T, path string)
		check    func(t *testing.T, in []pcapfile.Packet, inIfs []pcapfile.Interface) // input sanity
	}{
		{
			name: "pcap-usec-ethernet-mixed", agent: "replay-mixed", file: "mixed.pcap",
			write: func(t *testing.T, path string) {
				writeGenFile(t, path, gen.FileConfig{Count: 3000, Mix: gen.MixMixed, Stream: 11, Seed: 1})
			},
			check: func(t *testing.T, in []pcapfile.Packet, _ []pcapfile.Interface) {
				sizes := map[int]bool{}
				for _, p := range in {
					sizes[len(p.Data)] = true
				}
				if !sizes[9000] || !sizes[65535] {
					t.Fatalf("input lacks 9000- or 65535-byte frames")
				}
			},
		},
		{
			name: "pcap-nsec-raw", agent: "replay-raw", file: "raw.pcap",
			write: func(t *testing.T, path string) {
				writeGenFile(t, path, gen.FileConfig{Count: 3000, Mix: gen.MixIMIX, Stream: 12, Nanosecond: true, LinkType: gen.LinkTypeRaw, Seed: 2})
			},
			check: func(t *testing.T, in []pcapfile.Packet, _ []pcapfile.Interface) {
				for _, p := range in {
					if p.Timestamp%1000 != 0 {
						return
					}
				}
				t.Fatalf("input has no sub-microsecond timestamps")
			},
		},
		{
			name: "pcapng-two-link-types", agent: "replay-ng", file: "two-links.pcapng",
			write: writeTwoLinkPcapng,
			check: func(t *testing.T, in []pcapfile.Packet, _ []pcapfile.Interface) {
				cut := 0
				for _, p := range in {
					if p.OrigLen > uint32(len(p.Data)) {
						cut++
					}
				}
				if cut == 0 {
					t.Fatalf("input has no packets cut by the snaplen")
				}
			},
		},
	}
	// The same files again with every codec: the output must not change.
	for _, codec := range []string{"lz4", "s2", "zstd:19", "auto"} {
		for _, tt := range tests[:3] {
			tt.name += "-" + codec
			tt.compress = codec
			tests = append(tests, tt)
		}
	}
	// And written compressed: what tshark reads must not change either.
	for _, fc := range []string{"gzip", "zstd"} {
		for _, tt := range tests[:3] {
			tt.name += "-file-" + fc
			tt.files = fc
			tests = append(tests, tt)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			in := filepath.Join(t.TempDir(), tt.file)
			tt.write(t, in)
			inPkts, inIfs := readAll(t, in)
			tt.check(t, inPkts, inIfs)

			dir := t.TempDir()
			addr := freeport.Addr(t)
			collArgs := []string{"--rotate-interval", "0"} // one file, even across the top of an hour
			if tt.files != "" {
				collArgs = append(collArgs, "--file-compress", tt.files)
			}
			coll := startCollector(t, ctx, "", addr, dir, collArgs...)
			var extra []string
			if tt.compress != "" {
				extra = []string{"--compress", tt.compress}
			}
			agent := startReplay(t, ctx, addr, tt.agent, in, extra...)
			start := time.Now()
			s := finishReplay(t, agent, uint64(len(inPkts)), 30*time.Second)
			t.Logf("replayed %d packets in %v", len(inPkts), time.Since(start).Round(time.Millisecond))
			expectNoReconnects(t, agent, s)
			coll.stop(20 * time.Second)
			if cs := coll.collectorSummary(); cs.ProtocolErrors != 0 || cs.Duplicates != 0 {
				t.Errorf("collector summary %+v: want no protocol errors and no duplicates from a fault-free replay", cs)
			}

			if got := agentDirs(t, dir); !slices.Equal(got, []string{tt.agent}) {
				t.Errorf("collector dir holds %q, want only [%s]", got, tt.agent)
			}
			r := checkAgentDir(t, filepath.Join(dir, tt.agent))
			if len(r.Files) != 1 {
				t.Fatalf("want one output file, got %q", r.Files)
			}
			if ext := map[string]string{"": ".pcapng", "gzip": ".pcapng.gz", "zstd": ".pcapng.zst"}[tt.files]; !strings.HasSuffix(r.Files[0], ext) {
				t.Errorf("output %s, want a %s file", r.Files[0], ext)
			}
			if len(r.Corrupt) > 0 || r.Other > 0 {
				t.Errorf("output: %d corrupt and %d non-generated packets: %q", len(r.Corrupt), r.Other, r.Corrupt[:min(5, len(r.Corrupt))])
			}
			outPkts, outIfs := readAll(t, r.Files[0])
			comparePackets(t, tt.agent, filepath.Base(in), inPkts, inIfs, outPkts, outIfs)
			wantNames := map[string]int{}
			for _, p := range inPkts {
				wantNames[ifName(tt.agent, filepath.Base(in), inIfs, p.Interface)]++
			}
			if !mapsEqual(r.IfNames, wantNames) {
				t.Errorf("tshark frame.interface_name counts %v, want %v", r.IfNames, wantNames)
			}
		})
	}
}

// ifName is the name the collector gives input interface i of the file
// base replayed by agent: "<agent>:<if_name>", where a classic pcap's
// interface is named after the file and an unnamed pcapng interface
// "<file>#<index>".
func ifName(agent, base string, ifs []pcapfile.Interface, i int) string {
	name := ifs[i].Name
	if name == "" {
		name = base
		if len(ifs) > 1 {
			name += "#" + strconv.Itoa(i)
		}
	}
	return agent + ":" + name
}

// comparePackets requires out to be in, packet by packet.
func comparePackets(t *testing.T, agent, base string, in []pcapfile.Packet, inIfs []pcapfile.Interface, out []pcapfile.Packet, outIfs []pcapfile.Interface) {
	t.Helper()
	if len(out) != len(in) {
		t.Errorf("output has %d packets, input %d", len(out), len(in))
	}
	bad := 0
	for i := range min(len(in), len(out)) {
		a, b := in[i], out[i]
		ia, ib := inIfs[a.Interface], outIfs[b.Interface]
		var diff string
		switch {
		case a.Timestamp != b.Timestamp:
			diff = fmt.Sprintf("timestamp %d ns, want %d", b.Timestamp, a.Timestamp)
		case a.OrigLen != b.OrigLen:
			diff = fmt.Sprintf("original length %d, want %d", b.OrigLen, a.OrigLen)
		case !bytes.Equal(a.Data, b.Data):
			diff = fmt.Sprintf("%d captured bytes differ from the input's %d", len(b.Data), len(a.Data))
		case ia.LinkType != ib.LinkType:
			diff = fmt.Sprintf("interface %d link type %d, want %d", b.Interface, ib.LinkType, ia.LinkType)
		case ib.Name != ifName(agent, base, inIfs, a.Interface):
			diff = fmt.Sprintf("interface name %q, want %q", ib.Name, ifName(agent, base, inIfs, a.Interface))
		default:
			continue
		}
		if bad++; bad <= 10 {
			t.Errorf("packet %d: %s", i, diff)
		}
	}
	if bad > 10 {
		t.Errorf("... %d packets differ in all", bad)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestThreeAgents replays three files at once into one collector: each
// agent gets its own directory with exactly its own packets, and its file
// is finished (renamed from .part) as soon as it says goodbye.
func TestThreeAgents(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const count = 40000
	agents := []struct {
		name   string
		stream uint32
		mix    gen.Mix
	}{
		{"three-a", 21, gen.MixIMIX},
		{"three-b", 22, gen.Mix64},
		{"three-c", 23, gen.MixMixed},
	}
	inDir, dir := t.TempDir(), t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir)
	for _, a := range agents {
		writeGenFile(t, filepath.Join(inDir, a.name+".pcap"), gen.FileConfig{Count: count, Mix: a.mix, Stream: a.stream, Seed: uint64(a.stream)})
	}
	var procs []*proc // started together, after every input is written
	for _, a := range agents {
		procs = append(procs, startReplay(t, ctx, addr, a.name, filepath.Join(inDir, a.name+".pcap")))
	}
	for _, p := range procs {
		expectNoReconnects(t, p, finishReplay(t, p, count, 45*time.Second))
	}
	waitNoPart(t, dir, 5*time.Second)
	coll.stop(20 * time.Second)
	if cs := coll.collectorSummary(); cs.ProtocolErrors != 0 || cs.Duplicates != 0 || cs.Packets != 3*count {
		t.Errorf("collector summary %+v: want %d packets, no protocol errors and no duplicates", cs, 3*count)
	}

	var names []string
	for _, a := range agents {
		names = append(names, a.name)
	}
	if got := agentDirs(t, dir); !slices.Equal(got, names) {
		t.Errorf("collector dir holds %q, want %q", got, names)
	}
	for _, a := range agents {
		r := checkAgentDir(t, filepath.Join(dir, a.name))
		r.expectExactlyOnce(t, a.name, map[uint32]uint64{a.stream: count})
	}
}
