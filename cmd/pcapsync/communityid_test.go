package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// eachPacket calls fn with every packet of the pcapng (or pcap) file
// path, in file order, with the interfaces described so far, and
// returns every interface of the file.
func eachPacket(t *testing.T, path string, fn func(ifaces []pcapfile.Interface, p *pcapfile.Packet)) []pcapfile.Interface {
	t.Helper()
	return capturetest.EachPacket(t, path, func(r *pcapfile.Reader, p *pcapfile.Packet) { fn(r.Interfaces(), p) })
}

// readPackets reads a pcapng's packets as "time len hex" lines.
func readPackets(t *testing.T, path string) []string {
	t.Helper()
	var out []string
	eachPacket(t, path, func(_ []pcapfile.Interface, p *pcapfile.Packet) {
		out = append(out, fmt.Sprintf("%d %d %x", p.Timestamp, p.OrigLen, p.Data))
	})
	return out
}

// byCommunityID groups packets as readPackets gives them (Ethernet) by
// their Community ID (seed 0), each group in the order given.
func byCommunityID(packets []string) map[string][]string {
	m := map[string][]string{}
	for _, p := range packets {
		var ts, n int64
		var data []byte
		fmt.Sscanf(p, "%d %d %x", &ts, &n, &data)
		var k flow.Key
		flow.Decode(&k, flow.LinkEthernet, 0, data)
		id := k.CommunityID(0)
		m[id] = append(m[id], p)
	}
	return m
}

// TestQueryCommunityID: query --community-id writes exactly the packets
// of a full scan (--no-index) whose Community ID is the flow's, reading
// fewer index blocks, and as many as tshark -Y on the flow's addresses,
// protocol and ports finds in the data files.
func TestQueryCommunityID(t *testing.T) {
	dir, files := flowsRoot(t)
	tmp := t.TempDir()
	all := filepath.Join(tmp, "all.pcapng")
	runQ(t, "query", "--dir", dir, "--agent", "a", "--no-index", "-w", all)
	byID := byCommunityID(readPackets(t, all))
	var flows []flowquery.JSON
	for _, l := range strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--agent", "a", "--json", "--sort", "packets")), "\n") {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatal(err)
		}
		flows = append(flows, j)
	}
	merged := filepath.Join(tmp, "merged.pcapng")
	if _, err := exec.LookPath("mergecap"); err != nil {
		t.Skip("no mergecap")
	}
	if out, err := exec.Command("mergecap", append([]string{"-w", merged}, files["a"]...)...).CombinedOutput(); err != nil {
		t.Fatalf("mergecap: %v: %s", err, out)
	}
	seen := map[string]bool{}
	for _, j := range flows {
		kind := j.Proto + fmt.Sprint(len(j.VLAN)) + fmt.Sprint(strings.Contains(j.SrcIP, ":")) + fmt.Sprint(j.Parts > 2)
		if seen[kind] {
			continue
		}
		seen[kind] = true
		out := filepath.Join(tmp, "cid.pcapng")
		sum := runQ(t, "query", "--dir", dir, "--agent", "a", "--community-id", j.CommunityID, "-w", out, "--summary", "json")
		got := readPackets(t, out)
		want := byID[j.CommunityID]
		if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s (%s %s %s): %d packets, full scan %d", j.CommunityID, j.Proto, j.SrcIP, j.DstIP, len(got), len(want))
		}
		if uint64(len(got)) != j.SrcPackets+j.DstPackets {
			t.Errorf("%s: %d packets, the flow %d", j.CommunityID, len(got), j.SrcPackets+j.DstPackets)
		}
		if !strings.Contains(sum, `"blocks_skipped":`) || strings.Contains(sum, `"blocks_skipped":0,`) {
			t.Errorf("%s: summary %s, want blocks skipped", j.CommunityID, sum)
		}
		if n := tsharkCount(t, merged, j); n != len(got) {
			t.Errorf("%s: %d packets, tshark -Y %d", j.CommunityID, len(got), n)
		}
	}
	if len(seen) < 5 {
		t.Errorf("only %d kinds of flows tried", len(seen))
	}
}

// runQ runs a command and returns its stderr.
func runQ(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, &out, &errOut); err != nil {
		t.Fatalf("%q: %v (%s)", args, err, errOut.String())
	}
	return errOut.String()
}

// tsharkCount counts the packets tshark -Y selects by the flow's
// addresses, protocol and ports in the capture p (the data files
// merged).
func tsharkCount(t *testing.T, p string, j flowquery.JSON) int {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Skip("no tshark")
	}
	ip := "ip"
	if strings.Contains(j.SrcIP, ":") {
		ip = "ipv6"
	}
	y := fmt.Sprintf("%s.addr==%s && %s.addr==%s", ip, j.SrcIP, ip, j.DstIP)
	switch j.Proto {
	case "tcp", "udp":
		y += fmt.Sprintf(" && %s.port==%d && %s.port==%d", j.Proto, j.SrcPort, j.Proto, j.DstPort)
	case "icmp", "icmp6":
		y += " && " + map[string]string{"icmp": "icmp", "icmp6": "icmpv6"}[j.Proto]
	}
	out, err := exec.Command("tshark", "-n", "-r", p, "-Y", y, "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatalf("tshark -Y %q: %v", y, err)
	}
	return len(strings.Fields(string(out)))
}

// TestQueryCommunityIDFlags: a malformed id is a usage error.
func TestQueryCommunityIDFlags(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"query", "--dir", dir, "-w", "-", "--community-id", "1:abc"}, "community id"},
		{[]string{"query", "--dir", dir, "-w", "-", "--community-id", "2:" + strings.Repeat("A", 27) + "="}, "community id"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestCommunityIDStoreWritten: the writer and the readers agree on the
// flow files. Conversations written through a real store (flow files
// on, 4 KiB index blocks, 16 KiB files, splits every 10 packets): for
// every flow `pcapsync flows` lists, query --community-id writes
// exactly the packets of a full scan with its Community ID, and as
// many as the flow counts; the packets over all flows are every packet.
func TestCommunityIDStoreWritten(t *testing.T) {
	dir := t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(11, 40))
	flowtest.WriteStore(t, dir, "s", "s:eth0", ps, 16<<10, 4096, flow.Config{SplitPackets: 10})
	tmp := t.TempDir()
	all := filepath.Join(tmp, "all.pcapng")
	runQ(t, "query", "--dir", dir, "--no-index", "-w", all)
	scan := readPackets(t, all)
	if len(scan) != len(ps) {
		t.Fatalf("full scan: %d packets, wrote %d", len(scan), len(ps))
	}
	byID := byCommunityID(scan)
	total, skipped := 0, false
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--json")), "\n") {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatal(err)
		}
		if seen[j.CommunityID] { // the same 5-tuple again (a new TCP flow on the same ports): one query answers both
			continue
		}
		seen[j.CommunityID] = true
		out := filepath.Join(tmp, "cid.pcapng")
		sum := runQ(t, "query", "--dir", dir, "--community-id", j.CommunityID, "-w", out, "--summary", "json")
		got := readPackets(t, out)
		if want := byID[j.CommunityID]; strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s (%s %s %s): %d packets, full scan %d", j.CommunityID, j.Proto, j.SrcIP, j.DstIP, len(got), len(want))
		}
		total += len(got)
		skipped = skipped || (strings.Contains(sum, `"blocks_skipped":`) && !strings.Contains(sum, `"blocks_skipped":0,`))
	}
	t.Logf("%d flows, %d packets, files: %d", len(seen), total, countFiles(t, dir))
	if total != len(ps) {
		t.Errorf("the flows' packets: %d, wrote %d", total, len(ps))
	}
	if !skipped {
		t.Error("no query skipped a block: the flows' block runs were not used")
	}
}

// countFiles counts agent s's flow files below dir.
func countFiles(t *testing.T, dir string) int {
	m, err := filepath.Glob(filepath.Join(dir, "s", "*.flows"))
	if err != nil {
		t.Fatal(err)
	}
	return len(m)
}

// TestQueryCommunityIDFrom: query --community-id --from (GET /query with
// community_id) writes the packets the local query writes, the server
// reading only the blocks the flow's records name; a malformed id is
// refused by the server (400) and so a usage error.
func TestQueryCommunityIDFrom(t *testing.T) {
	dir, _ := flowsRoot(t)
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	tmp := t.TempDir()
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(runFlows(t, "--dir", dir, "--json", "--sort", "packets")), "\n") {
		var j flowquery.JSON
		if err := json.Unmarshal([]byte(l), &j); err != nil {
			t.Fatal(err)
		}
		if kind := j.Proto + fmt.Sprint(j.Parts > 2); !seen[kind] {
			seen[kind] = true
			local, remote := filepath.Join(tmp, "local.pcapng"), filepath.Join(tmp, "remote.pcapng")
			runQ(t, "query", "--dir", dir, "--community-id", j.CommunityID, "-w", local)
			sum := runQ(t, "query", "--from", addr, "--insecure", "--community-id", j.CommunityID, "-w", remote, "--summary", "json")
			want, got := readPackets(t, local), readPackets(t, remote)
			if len(got) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("%s (%s): %d packets over --from, %d here", j.CommunityID, j.Proto, len(got), len(want))
			}
			if !strings.Contains(sum, `"blocks_skipped":`) || strings.Contains(sum, `"blocks_skipped":0,`) {
				t.Errorf("%s: summary %s, want blocks skipped on the server", j.CommunityID, sum)
			}
		}
	}
	if len(seen) < 4 {
		t.Errorf("only %d kinds of flows tried", len(seen))
	}
	var out, errOut bytes.Buffer
	err := run(context.Background(), []string{"query", "--from", addr, "--insecure", "-w", "-", "--community-id", "1:abc"}, &out, &errOut)
	if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), "community id") {
		t.Errorf("a malformed id over --from: %v (exit %d), want a usage error naming it", err, exitCode(err))
	}
}
