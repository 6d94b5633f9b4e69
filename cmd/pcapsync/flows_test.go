package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// flowsRoot writes a root of two agents (a: every conversation, b: the
// even ones), records split every 10 packets.
func flowsRoot(t *testing.T) (string, map[string][]string) {
	t.Helper()
	dir := t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(7, 50))
	files := flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{
		{Name: "a", Iface: "a:eth0", PerFile: 97},
		{Name: "b", Iface: "b:eth1", PerFile: 60, Keep: func(c int) bool { return c%2 == 0 }},
	}, &flow.Config{SplitPackets: 10})
	return dir, files
}

func runFlows(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), append([]string{"flows"}, args...), &out, &errOut); err != nil {
		t.Fatalf("flows %q: %v (%s)", args, err, errOut.String())
	}
	return out.String()
}

// TestFlowsFlags: usage errors exit 2.
func TestFlowsFlags(t *testing.T) {
	dir := t.TempDir()
	q := []string{"flows", "--dir", dir}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"flows"}, "flows needs --dir"},
		{append(q, "--json", "--csv"), "exclude each other"},
		{append(q, "--top", "-1"), "--top"},
		{append(q, "--top", "3", "--same"), "exclude each other"},
		{append(q, "--by", "flows"), "go with --top"},
		{append(q, "--top", "3", "--by", "weight"), "top by"},
		{append(q, "--top", "3", "--group", "vlan"), "top per"},
		{append(q, "--sort", "size"), "sort by"},
		{append(q, "udp", "port", "99999"), "filter"},
		{append(q, "--since", "2026-02-30 10:00:00"), "--since"},
		{append(q, "--since", "2026-11-24T10:00:00Z", "--until", "2026-11-24T09:00:00Z"), "empty time range"},
		{append(q, "--agent", "[x"), "pattern"},
		{append(q, "--insecure"), "go with --from"},
		{append(q, "--from", "127.0.0.1:1"), "--dir and --from exclude each other"},
		{[]string{"flows", "--dir", filepath.Join(dir, "nope")}, "no such file"},
		{append(q, "--max-flows", "-1"), "negative"},
		{append(q, "--community-id", "1:x"), "--community-id"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// conv is a TCP or UDP conversation as tshark's tables key it: the
// smaller "addr:port" first, with the frames and bytes each sent.
type tconv struct{ frames, bytes [2]uint64 }

// TestFlowsTshark: per conversation, flows --json's packets and bytes
// each way equal tshark -q -z conv,tcp -z conv,udp over the same data
// files (summed over the files a conversation spans).
func TestFlowsTshark(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("no tshark")
	}
	dir, files := flowsRoot(t)
	ours := map[string]tconv{}
	for _, line := range strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--agent", "a", "--json")), "\n") {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(line), &j); err != nil {
			t.Fatal(err)
		}
		if j.Proto != "tcp" && j.Proto != "udp" {
			continue
		}
		x := netip.AddrPortFrom(netip.MustParseAddr(j.SrcIP), j.SrcPort).String()
		y := netip.AddrPortFrom(netip.MustParseAddr(j.DstIP), j.DstPort).String()
		addConv(ours, j.Proto+" "+x, j.Proto+" "+y, [2]uint64{j.SrcPackets, j.DstPackets}, [2]uint64{j.SrcBytes, j.DstBytes})
	}
	theirs := map[string]tconv{}
	for _, p := range files["a"] {
		out, err := exec.Command("tshark", "-n", "-q", "-z", "conv,tcp", "-z", "conv,udp", "-r", p).Output()
		if err != nil {
			t.Fatalf("tshark: %v", err)
		}
		tsharkConvRows(t, out, theirs)
	}
	if len(ours) == 0 || len(ours) != len(theirs) {
		t.Errorf("%d conversations, tshark %d", len(ours), len(theirs))
	}
	for k, v := range theirs {
		if ours[k] != v {
			t.Errorf("%s: ours %+v, tshark %+v", k, ours[k], v)
		}
	}
}

func addConv(m map[string]tconv, x, y string, frames, bytes [2]uint64) {
	if x > y {
		x, y = y, x
		frames[0], frames[1], bytes[0], bytes[1] = frames[1], frames[0], bytes[1], bytes[0]
	}
	c := m[x+" "+y]
	for i := range 2 {
		c.frames[i] += frames[i]
		c.bytes[i] += bytes[i]
	}
	m[x+" "+y] = c
}

// tsharkConvRows reads "-z conv,tcp/udp" rows: "A <-> B framesBA bytesBA
// framesAB bytesAB ..." ("<-" counts B to A), bytes as "N bytes".
func tsharkConvRows(t *testing.T, out []byte, m map[string]tconv) {
	t.Helper()
	proto := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case strings.HasPrefix(sc.Text(), "TCP Conversations"):
			proto = "tcp"
		case strings.HasPrefix(sc.Text(), "UDP Conversations"):
			proto = "udp"
		}
		if proto == "" || len(f) < 9 || f[1] != "<->" {
			continue
		}
		if f[5] != "bytes" || f[8] != "bytes" {
			t.Fatalf("tshark row %q: bytes not exact", sc.Text())
		}
		n := func(s string) uint64 { v, _ := strconv.ParseUint(s, 10, 64); return v }
		hp := func(s string) string {
			i := strings.LastIndexByte(s, ':')
			return proto + " " + netip.AddrPortFrom(netip.MustParseAddr(s[:i]), uint16(n(s[i+1:]))).String()
		}
		addConv(m, hp(f[0]), hp(f[2]), [2]uint64{n(f[6]), n(f[3])}, [2]uint64{n(f[7]), n(f[4])})
	}
}

// TestFlowsOutputs: the table, --csv and --json hold the same flows,
// --same gathers the agents' flows of a conversation, --top sums.
func TestFlowsOutputs(t *testing.T) {
	dir, _ := flowsRoot(t)
	js := strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--json")), "\n")
	rows, err := csv.NewReader(strings.NewReader(runFlows(t, "--dir", dir, "--csv"))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	table := strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir)), "\n")
	if len(js) != 75 || len(rows) != 76 || len(table) != 76 {
		t.Errorf("%d JSON lines, %d CSV rows, %d table lines; want 75 flows", len(js), len(rows), len(table))
	}
	var total uint64
	for _, l := range js {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{`"community_id":"1:`, `"first":"2026-11-24T10:`, `"end":"`, `"tcp_flags":`} {
			if !strings.Contains(l, k) {
				t.Errorf("%s: no %s", l, k)
			}
		}
		total += j.SrcBytes + j.DstBytes
	}
	same := strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--json", "--same")), "\n")
	if len(same) != 50 || !strings.Contains(strings.Join(same, ""), `"agents":2`) {
		t.Errorf("--same: %d groups, want 50 with some of 2 agents", len(same))
	}
	top := runFlows(t, "--dir", dir, "--top", "5", "--group", "agent", "--json")
	var a, b flowquery.Talker
	dec := json.NewDecoder(strings.NewReader(top))
	if dec.Decode(&a) != nil || dec.Decode(&b) != nil || a.Key != "a" || b.Key != "b" || a.Bytes+b.Bytes != total || a.Flows != 50 || b.Flows != 25 {
		t.Errorf("--top agent: %+v %+v, want a then b, %d bytes in all", a, b, total)
	}
	hosts := strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--top", "3", "--by", "flows")), "\n")
	if len(hosts) != 4 || !strings.HasPrefix(strings.TrimSpace(hosts[1]), "192.168.1.") {
		t.Errorf("--top 3 --by flows:\n%s", strings.Join(hosts, "\n"))
	}
}

// TestFlowsFrom: flows --from a query listener (plain HTTP on loopback)
// prints what flows --dir prints, in every output form.
func TestFlowsFrom(t *testing.T) {
	dir, _ := flowsRoot(t)
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	for _, args := range [][]string{
		{"--json"}, {"--csv"}, {}, {"--json", "--agent", "b", "tcp or vlan"}, {"--top", "4", "--group", "pair"},
		{"--same", "--json"}, {"--sort", "bytes", "--csv", "--since", "2026-11-24T10:00:00.05Z"},
	} {
		local := runFlows(t, append([]string{"--dir", dir}, args...)...)
		remote := runFlows(t, append([]string{"--from", addr, "--insecure"}, args...)...)
		// A flow from --from says its server: the JSON key, the CSV column.
		remote = strings.ReplaceAll(remote, `,"server":"`+addr+`"`, "")
		remote = strings.ReplaceAll(remote, ",server\n", "\n")
		remote = strings.ReplaceAll(remote, ","+addr+"\n", "\n")
		if local == "" || remote != local {
			t.Errorf("%q: --from differs from --dir:\n%s\n---\n%s", args, remote, local)
		}
	}
}

// TestFlowsCommunityID: flows --community-id prints the flows of that
// Community ID only (those of all the flows with it: both agents'),
// --from the same (GET /flows?community_id=).
func TestFlowsCommunityID(t *testing.T) {
	dir, _ := flowsRoot(t)
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	all := strings.SplitAfter(runFlows(t, "--dir", dir, "--json"), "\n")
	var first struct {
		CommunityID string `json:"community_id"`
	}
	if err := json.Unmarshal([]byte(all[0]), &first); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, l := range all {
		if strings.Contains(l, `"community_id":"`+first.CommunityID+`"`) {
			want.WriteString(l)
		}
	}
	local := runFlows(t, "--dir", dir, "--json", "--community-id", first.CommunityID)
	remote := strings.ReplaceAll(runFlows(t, "--from", addr, "--insecure", "--json", "--community-id", first.CommunityID), `,"server":"`+addr+`"`, "")
	if local != want.String() || remote != local || strings.Count(local, "\n") < 2 || !strings.Contains(local, `"agent":"b"`) {
		t.Errorf("--community-id %s:\n%s---\n--from:\n%s---\nwant:\n%s", first.CommunityID, local, remote, want.String())
	}
}

// TestFlowsSummary: data files without a flow file (a root written with
// --flows=false, or before flow records) are reported at exit, with
// what to run, in the text and the JSON summary and with --top alike;
// once pcapsync index has given them one there are none and their flows
// are shown.
func TestFlowsSummary(t *testing.T) {
	dir, files := flowsRoot(t)
	for _, p := range files["a"][:2] {
		if err := os.Remove(flow.Path(p)); err != nil {
			t.Fatal(err)
		}
	}
	flows := func(args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		if err := run(context.Background(), append([]string{"flows", "--dir", dir}, args...), &out, &errOut); err != nil {
			t.Fatalf("flows %q: %v (%s)", args, err, errOut.String())
		}
		return out.String(), errOut.String()
	}
	total := len(files["a"]) + len(files["b"])
	for _, args := range [][]string{nil, {"--top", "3"}, {"--json"}} {
		_, se := flows(args...)
		if want := "pcapsync flows: 2 data files have no flow records (written with --flows=false or before flow records): their flows are not shown; run pcapsync index " + dir + "\n"; !strings.Contains(se, want) {
			t.Errorf("%q: stderr %q, want %q", args, se, want)
		}
		if !strings.Contains(se, fmt.Sprintf("flows from %d data files", total)) {
			t.Errorf("%q: stderr %q, want the files counted", args, se)
		}
	}
	var sum struct {
		Flows   int `json:"flows"`
		Files   int `json:"files"`
		NoFlows int `json:"files_without_flows"`
	}
	out, se := flows("--json", "--summary", "json")
	if err := json.Unmarshal([]byte(se), &sum); err != nil {
		t.Fatalf("summary %q: %v", se, err)
	}
	if sum.NoFlows != 2 || sum.Files != total || sum.Flows != strings.Count(out, "\n") || sum.Flows == 0 {
		t.Errorf("summary %+v, want 2 of %d files without flows and %d flows", sum, total, strings.Count(out, "\n"))
	}
	before := sum.Flows
	runQ(t, "index", dir)
	_, se = flows("--json", "--summary", "json")
	if err := json.Unmarshal([]byte(se), &sum); err != nil {
		t.Fatalf("summary %q: %v", se, err)
	}
	if sum.NoFlows != 0 || sum.Flows <= before {
		t.Errorf("after pcapsync index: summary %+v, want every file with flows and more than %d flows", sum, before)
	}
}

// TestFlowsNothingToAnswer: flows exits 3 with the reason when no agent
// matches or the range is outside the data the agents keep, and 0 for
// a filter that matches no flow in data that is kept.
func TestFlowsNothingToAnswer(t *testing.T) {
	dir, _ := flowsRoot(t)
	before := time.Unix(0, flowtest.Base).Add(-time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--agent", "zz"}, 3, "nothing to answer from: no agent of " + dir + " matches --agent zz; agents there: a,b"},
		{[]string{"--until", before}, 3, "nothing to answer from: the range is outside the data kept of the agents selected: they keep " + time.Unix(0, flowtest.Base).UTC().Format(time.RFC3339Nano) + " to "},
		{[]string{"tcp port 9"}, 0, ""},
	} {
		var so, se bytes.Buffer
		err := run(context.Background(), append([]string{"flows", "--dir", dir}, tc.args...), &so, &se)
		code := 0
		if err != nil {
			code = exitCode(err)
		}
		if code != tc.code || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("flows %q: %v (exit %d), want exit %d with %q", tc.args, err, code, tc.code, tc.want)
		}
	}
}
