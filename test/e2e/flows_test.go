//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// flowAgents are the agents of TestFlowsMatchReferences and the
// conversations each sees: some by one, some by both.
var flowAgents = []struct {
	name string
	keep func(c int) bool
}{
	{"fa", func(c int) bool { return c%3 != 2 }},
	{"fb", func(c int) bool { return c%3 != 0 }},
}

// flowSnap is the snaplen of TestFlowsMatchReferences's input.
const flowSnap = 200

// writeFlowInput writes the packets of conversations keep selects to a
// pcapng file for an agent to replay, cut at a snaplen of flowSnap
// bytes (so that wire and captured bytes differ), every seventh TCP data packet
// sent twice (a retransmission, 400 µs later), and returns how many
// packets it wrote.
func writeFlowInput(t *testing.T, path string, cs []flowtest.Conv, ps []flowtest.Packet, keep func(int) bool) uint64 {
	t.Helper()
	var sel []flowtest.Packet
	for i, p := range ps {
		if !keep(p.C) {
			continue
		}
		sel = append(sel, p)
		if c := cs[p.C]; c.Proto == flow.ProtoTCP && i%7 == 3 && tcpFlags(c, p.Frame) == flow.TCPAck {
			sel = append(sel, flowtest.Packet{TS: p.TS + 400e3, C: p.C, Init: p.Init, Frame: p.Frame})
		}
	}
	slices.SortStableFunc(sel, func(a, b flowtest.Packet) int { return int(a.TS - b.TS) })
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	w, err := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(pcapfile.Interface{Name: "eth0", LinkType: 1, SnapLen: flowSnap}); err != nil {
		t.Fatal(err)
	}
	for _, p := range sel {
		if err := w.WritePacket(0, p.TS, uint32(len(p.Frame)), p.Frame[:min(len(p.Frame), flowSnap)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return uint64(len(sel))
}

// tcpFlags returns the TCP flags of a frame of c.
func tcpFlags(c flowtest.Conv, frame []byte) uint8 {
	off := 14 + 20 + 13
	if c.VLAN != 0 {
		off += 4
	}
	if c.Src.Is6() {
		off += 20
	}
	return frame[off]
}

// e2eConv is a conversation's frames and bytes per direction, the
// lower key's side first.
type e2eConv struct{ frames, bytes [2]uint64 }

// addE2EConv adds one direction-aware count to m under the ordered pair
// x, y; exact is false where tshark rounded the bytes.
func addE2EConv(m map[string]e2eConv, kind, x, y string, frames, bytes [2]uint64) {
	if x > y {
		x, y = y, x
		frames[0], frames[1], bytes[0], bytes[1] = frames[1], frames[0], bytes[1], bytes[0]
	}
	c := m[kind+" "+x+" "+y]
	for i := range 2 {
		c.frames[i] += frames[i]
		c.bytes[i] += bytes[i]
	}
	m[kind+" "+x+" "+y] = c
}

// tsharkConvTables reads tshark's "-z conv,tcp/udp/ip/ipv6" tables:
// rows "A <-> B framesBA bytesBA framesAB bytesAB ..." ("<-" counts B
// to A). Rows whose bytes tshark rounded (kB) are returned in rounded.
func tsharkConvTables(t *testing.T, out string, m map[string]e2eConv, rounded map[string]bool) {
	t.Helper()
	kind := ""
	for line := range strings.Lines(out) {
		for _, k := range []string{"TCP", "UDP", "IPv4", "IPv6"} {
			if strings.HasPrefix(line, k+" Conversations") {
				kind = strings.ToLower(k)
			}
		}
		f := strings.Fields(line)
		if kind == "" || len(f) < 9 || f[1] != "<->" {
			continue
		}
		n := func(s string) uint64 {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				t.Fatalf("tshark row %q: %v", line, err)
			}
			return v
		}
		ep := func(s string) string {
			if kind == "ipv4" || kind == "ipv6" {
				return netip.MustParseAddr(s).String()
			}
			i := strings.LastIndexByte(s, ':')
			return netip.AddrPortFrom(netip.MustParseAddr(s[:i]), uint16(n(s[i+1:]))).String()
		}
		x, y := ep(f[0]), ep(f[2])
		var b [2]uint64
		if f[5] == "bytes" && f[8] == "bytes" {
			b = [2]uint64{n(f[7]), n(f[4])}
		} else {
			lo, hi := min(x, y), max(x, y)
			rounded[kind+" "+lo+" "+hi] = true
		}
		addE2EConv(m, kind, x, y, [2]uint64{n(f[6]), n(f[3])}, b)
	}
}

// flowConvs adds a flow's counts to m as tshark's tables would count
// them: TCP and UDP by address and port, every IP flow by address pair.
func flowConvs(m map[string]e2eConv, j flowquery.JSON) {
	frames, bytes := [2]uint64{j.SrcPackets, j.DstPackets}, [2]uint64{j.SrcBytes, j.DstBytes}
	s, d := netip.MustParseAddr(j.SrcIP), netip.MustParseAddr(j.DstIP)
	if j.Proto == "tcp" || j.Proto == "udp" {
		addE2EConv(m, j.Proto, netip.AddrPortFrom(s, j.SrcPort).String(), netip.AddrPortFrom(d, j.DstPort).String(), frames, bytes)
	}
	kind := "ipv4"
	if s.Is6() {
		kind = "ipv6"
	}
	addE2EConv(m, kind, s.String(), d.String(), frames, bytes)
}

// communityIDPython returns the Python interpreter with the reference
// communityid package (scripts/deps.sh installs it into a venv), as
// internal/flow's TestCommunityIDReference finds it.
func communityIDPython(t *testing.T) string {
	t.Helper()
	cands := []string{os.Getenv("PCAPSYNC_COMMUNITYID_PYTHON")}
	if cache, err := os.UserCacheDir(); err == nil {
		cands = append(cands, filepath.Join(cache, "pcapsync", "venv", "bin", "python3"))
	}
	for _, c := range append(cands, "python3") {
		if c != "" && exec.Command(c, "-c", "import communityid").Run() == nil {
			return c
		}
	}
	missing(t, "the Community ID reference (python3 with the communityid package; scripts/deps.sh)")
	return ""
}

// communityIDScript reads "proto saddr daddr sport dport" lines and
// prints the reference's Community ID (v1, seed 0) of each.
const communityIDScript = `
import sys, communityid
cid = communityid.CommunityID(seed=0)
for line in sys.stdin:
    p, s, d, sp, dp = line.split()
    print(cid.calc(communityid.FlowTuple(int(p), s, d, int(sp), int(dp))))
`

var protoNumbers = map[string]int{"tcp": flow.ProtoTCP, "udp": flow.ProtoUDP, "icmp": flow.ProtoICMP, "icmp6": flow.ProtoICMPv6}

// flowFilter is the tshark display filter of a flow's 5-tuple (and its
// VLAN if tagged).
func flowFilter(j flowquery.JSON) string {
	ip := "ip"
	if netip.MustParseAddr(j.SrcIP).Is6() {
		ip = "ipv6"
	}
	f := fmt.Sprintf("%s.addr==%s && %s.addr==%s", ip, j.SrcIP, ip, j.DstIP)
	switch j.Proto {
	case "tcp", "udp":
		f += fmt.Sprintf(" && %s.port==%d && %s.port==%d", j.Proto, j.SrcPort, j.Proto, j.DstPort)
	case "icmp":
		f += " && icmp"
	case "icmp6":
		f += " && icmpv6"
	}
	if len(j.VLAN) > 0 {
		f += fmt.Sprintf(" && vlan.id==%d", j.VLAN[0])
	}
	return f
}

// tsharkPackets lists the packets of files that filter keeps as
// "time/caplen/len/ether source" lines, sorted.
func tsharkPackets(t *testing.T, filter string, files ...string) []string {
	t.Helper()
	var rows []string
	for _, f := range files {
		args := []string{"-n", "-r", f, "-T", "fields", "-e", "frame.time_epoch", "-e", "frame.cap_len", "-e", "frame.len", "-e", "eth.src"}
		if filter != "" {
			args = append(args, "-Y", filter)
		}
		rows = append(rows, strings.Fields(strings.ReplaceAll(runTool(t, "tshark", args...), "\t", "/"))...)
	}
	slices.Sort(rows)
	return rows
}

// TestFlowsMatchReferences is issue 27's correctness test, end to end:
// generated TCP (handshakes, data, FIN and RST ends, retransmissions),
// UDP, ICMP, IPv6 and VLAN traffic, replayed by two agents (some
// conversations seen by both) into one collector rotating every 16 KB,
// so that flows span files. Then per agent `pcapsync flows --json`
// counts what tshark's conv,tcp/udp/ip/ipv6 tables count over the
// agent's data files; every flow's Community ID is the reference
// implementation's; and for a flow of each kind `pcapsync query
// --community-id` writes the packets tshark -Y selects by its 5-tuple
// from all the data files.
func TestFlowsMatchReferences(t *testing.T) {
	requireTools(t, "tshark")
	py := communityIDPython(t)
	ctx := testContext(t)
	in, dir, work := t.TempDir(), t.TempDir(), t.TempDir()
	cs := flowtest.GenConvs(27, 90)
	ps := flowtest.GenPackets(cs)
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--rotate-size", "16K")
	var agents []*proc
	var counts []uint64
	for _, a := range flowAgents {
		file := filepath.Join(in, a.name+".pcapng")
		counts = append(counts, writeFlowInput(t, file, cs, ps, a.keep))
		agents = append(agents, startReplay(t, ctx, addr, a.name, file, "--batch-size", "4K"))
	}
	for i, p := range agents {
		finishReplay(t, p, counts[i], 30*time.Second)
	}
	waitNoPart(t, dir, 5*time.Second)
	coll.stop(20 * time.Second)

	out, err := exec.Command(pcapsyncBin, "flows", "--dir", dir, "--json").Output()
	if err != nil {
		t.Fatalf("pcapsync flows --json: %v", err)
	}
	var flows []flowquery.JSON
	for line := range strings.Lines(string(out)) {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatalf("flows --json line %q: %v", line, err)
		}
		flows = append(flows, j)
	}

	// (a) Conversations per agent, as tshark counts them.
	var all []string
	for _, a := range flowAgents {
		names := dirEntries(t, filepath.Join(dir, a.name))
		var files []string
		for _, n := range names {
			files = append(files, filepath.Join(dir, a.name, n))
		}
		if len(files) < 3 {
			t.Fatalf("%s: %d data files, want rotation", a.name, len(files))
		}
		all = append(all, files...)
		ours, theirs, rounded := map[string]e2eConv{}, map[string]e2eConv{}, map[string]bool{}
		for _, j := range flows {
			if j.Agent == a.name {
				flowConvs(ours, j)
			}
		}
		for _, f := range files {
			tsharkConvTables(t, runTool(t, "tshark", "-n", "-q", "-z", "conv,tcp", "-z", "conv,udp", "-z", "conv,ipv6", "-z", "conv,ip", "-r", f), theirs, rounded)
		}
		if len(theirs) < 50 || len(ours) != len(theirs) {
			t.Errorf("%s: %d conversations, tshark %d", a.name, len(ours), len(theirs))
		}
		exact := 0
		for k, v := range theirs {
			o := ours[k]
			if rounded[k] {
				o.bytes, v.bytes = [2]uint64{}, [2]uint64{}
			} else {
				exact++
			}
			if o != v {
				t.Errorf("%s %s: flows %+v, tshark %+v", a.name, k, ours[k], v)
			}
		}
		if exact < len(theirs)*9/10 {
			t.Errorf("%s: tshark gave exact bytes for only %d of %d conversations", a.name, exact, len(theirs))
		}
	}

	// (b) Community IDs, all flows in one Python run.
	var tuples bytes.Buffer
	for _, j := range flows {
		fmt.Fprintf(&tuples, "%d %s %s %d %d\n", protoNumbers[j.Proto], j.SrcIP, j.DstIP, j.SrcPort, j.DstPort)
	}
	cmd := exec.Command(py, "-c", communityIDScript)
	cmd.Stdin = &tuples
	ref, err := cmd.Output()
	if err != nil {
		t.Fatalf("the communityid reference: %v", err)
	}
	ids := strings.Fields(string(ref))
	if len(ids) != len(flows) {
		t.Fatalf("the reference gave %d ids for %d flows", len(ids), len(flows))
	}
	for i, j := range flows {
		if j.CommunityID != ids[i] {
			t.Errorf("%s %s %s:%d > %s:%d: community_id %s, the reference %s", j.Agent, j.Proto, j.SrcIP, j.SrcPort, j.DstIP, j.DstPort, j.CommunityID, ids[i])
		}
	}

	// (c) A flow of each kind: query --community-id against tshark -Y.
	kinds := map[string]func(j flowquery.JSON) bool{
		"tcp": func(j flowquery.JSON) bool {
			return j.Proto == "tcp" && len(j.VLAN) == 0 && strings.Contains(j.SrcIP, ".")
		},
		"udp": func(j flowquery.JSON) bool {
			return j.Proto == "udp" && len(j.VLAN) == 0 && strings.Contains(j.SrcIP, ".")
		},
		"icmp": func(j flowquery.JSON) bool { return j.Proto == "icmp" && len(j.VLAN) == 0 },
		"v6":   func(j flowquery.JSON) bool { return j.Proto == "tcp" && strings.Contains(j.SrcIP, ":") },
		"vlan": func(j flowquery.JSON) bool { return len(j.VLAN) > 0 && j.Proto == "udp" },
	}
	for kind, match := range kinds {
		i := slices.IndexFunc(flows, func(j flowquery.JSON) bool { return match(j) && j.Parts > 1 })
		if i < 0 {
			i = slices.IndexFunc(flows, match)
		}
		if i < 0 {
			t.Errorf("%s: no such flow", kind)
			continue
		}
		j := flows[i]
		w := filepath.Join(work, kind+".pcapng")
		if b, err := exec.Command(pcapsyncBin, "query", "--dir", dir, "--community-id", j.CommunityID, "-w", w).CombinedOutput(); err != nil {
			t.Fatalf("query --community-id %s: %v\n%s", j.CommunityID, err, b)
		}
		got, want := tsharkPackets(t, "", w), tsharkPackets(t, flowFilter(j), all...)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s flow %s (%s): query --community-id gave %d packets, tshark -Y %q %d:\n%v\n%v", kind, j.CommunityID, j.Agent, len(got), flowFilter(j), len(want), got, want)
		}
	}
}
