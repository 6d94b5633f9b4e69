//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/netns"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// The router's nftables: in the forward hook, a counter of IP fragments
// (any protocol), a counter of the datagrams to the collector's port
// that carry a batch or a piece (frame type, UDP payload byte 2: 4 or
// 10) and a rule dropping 5% of those at random, counted. Hellos,
// stats and goodbyes pass untouched.
const udpLossRules = `table ip pcs {
	counter frags {}
	counter sequenced {}
	counter dropped {}
	chain loss {
		type filter hook forward priority 0; policy accept;
		ip frag-off & 0x3fff != 0 counter name frags
		udp dport %[1]d @th,80,8 { 4, 10 } counter name sequenced
		udp dport %[1]d @th,80,8 { 4, 10 } numgen random mod 100 < 5 counter name dropped drop comment "loss"
	}
}
`

// TestUDPLossThroughRouter replays an IMIX file with jumbo frames over
// --transport udp --mtu 1500 from namespace A to a collector in C,
// through a router namespace R that drops 5% of the batch and piece
// datagrams: no IP fragment crosses the router, the collector's lost
// count equals the router's drop counter, every packet written is
// intact and written once, and the packets missing are at most 1.5
// times the share of datagrams dropped (plus a slack for chance).
//
// The drop rule is deleted once most of the stream has passed (the
// router's counter says so), and the test checks that datagrams passed
// after that: a drop of the stream's last datagrams would be invisible
// to the collector (no higher number follows), so only then must its
// lost count equal the drops exactly.
func TestUDPLossThroughRouter(t *testing.T) {
	requireRoot(t)
	requireTools(t, append([]string{"ip", "nft"}, checkTools...)...)
	ch := netns.NewChain(t, "pcsloss", 1500)
	const port = 7744
	nft(t, ch.R, "-f", "-", fmt.Sprintf(udpLossRules, port))
	ctx := testContext(t)

	const count, stream = 24000, 12
	in, dir := filepath.Join(t.TempDir(), "in.pcap"), t.TempDir()
	lowerBound := writeIMIXJumbo(t, in, count, stream)
	addr := fmt.Sprintf("%s:%d", netns.ChainAddrC, port)
	coll := startCollector(t, ctx, ch.C, addr, dir, "--listen-udp", addr)
	agent := startProc(t, ctx, "agent udploss", ch.A, "agent", "--collector", addr, "--name", "udploss",
		"--read", in, "--transport", "udp", "--mtu", "1500", "--max-rate", "8000")

	// Once 90% of the fewest datagrams that can carry the stream passed
	// the router (some 80% of it), the rest pass undropped.
	testutil.Eventually(t, 60*time.Second, func() error {
		if n := nftCounter(t, ch.R, "sequenced"); n >= lowerBound*9/10 {
			return nil
		} else if agent.exited() {
			return fmt.Errorf("agent exited before the router saw %d datagrams:\n%s%w", lowerBound*9/10, agent.stderr.String(), testutil.ErrGiveUp)
		} else {
			return fmt.Errorf("the router saw %d datagrams, want %d", n, lowerBound*9/10)
		}
	})
	nft(t, ch.R, "delete", "rule", "ip", "pcs", "loss", "handle", ruleHandle(t, ch.R, "loss"))
	dropped := nftCounter(t, ch.R, "dropped")
	after := nftCounter(t, ch.R, "sequenced")

	if code := agent.wait(40 * time.Second); code != 0 {
		t.Fatalf("agent exited with code %d:\n%s", code, agent.stderr.String())
	}
	waitNoPart(t, dir, 5*time.Second) // the goodbye closed the file
	coll.stop(20 * time.Second)
	sequenced, frags := nftCounter(t, ch.R, "sequenced"), nftCounter(t, ch.R, "frags")
	if sequenced <= after {
		t.Fatalf("no datagram passed the router after the drop rule was deleted (%d before, %d at the end): the test cannot tell invisible drops", after, sequenced)
	}
	as := agent.summary()
	if as.Read != count || as.Sent != count {
		t.Errorf("agent summary %+v: want %d read and sent", as, count)
	}
	if frags != 0 {
		t.Errorf("%d IP fragments crossed the router, want none", frags)
	}
	u := coll.collectorSummary().udpAgent(t, "udploss")
	lost := u.Lost
	if lost != dropped || u.Reordered != 0 || u.Duplicates != 0 || u.Late != 0 || u.Malformed != 0 {
		t.Errorf("collector's UDP counts %s: want lost = %d (the router's drops), nothing reordered, duplicated, late or malformed", u, dropped)
	}

	r := checkAgentDir(t, filepath.Join(dir, "udploss"))
	written := 0
	for k, c := range r.Counts {
		if k.stream != stream || k.seq >= count || c != 1 {
			t.Errorf("packet %v written %d times, want once (and only generated ones)", k, c)
		}
		written++
	}
	if r.Other != 0 || r.Cut != 0 || len(r.Corrupt) != 0 {
		t.Errorf("%d packets not generated, %d cut, %d corrupt; want none", r.Other, r.Cut, len(r.Corrupt))
	}
	dropShare := float64(dropped) / float64(sequenced)
	lossShare := float64(count-written) / count
	// The slack: a lost datagram takes whole batches of packets, so the
	// packet loss of one run varies more than the datagram loss; half a
	// percent of the packets is about three standard deviations of it
	// at this size.
	const slack = 0.005
	t.Logf("router: %d batch and piece datagrams, %d dropped (%.2f%%), %d IP fragments; collector lost %d; packets missing %d of %d (%.2f%%, %.2fx the drop share)",
		sequenced, dropped, 100*dropShare, frags, lost, count-written, count, 100*lossShare, lossShare/dropShare)
	if dropped == 0 || lossShare > 1.5*dropShare+slack {
		t.Errorf("packets missing %.2f%%, over 1.5 x %.2f%% dropped + %.1f%%", 100*lossShare, 100*dropShare, 100*slack)
	}
	if as.Pieced == 0 {
		t.Errorf("agent summary %+v: want batches sent in pieces", as)
	}
}

// writeIMIXJumbo writes count packets of stream to path: IMIX (64, 576
// and 1500 bytes, 7:4:1) with every 40th packet a 9000-byte jumbo
// frame. It returns a lower bound of the datagrams that carry them at
// MTU 1500: the pieces of the packets too big for a datagram, and the
// others' bytes in full datagrams.
func writeIMIXJumbo(t *testing.T, path string, count, stream int) uint64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bw := bufio.NewWriter(f)
	w, err := pcapfile.NewPcapWriter(bw, gen.LinkTypeEthernet, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 9000)
	const room = 1500 - 28
	var pieces, small int
	ts := int64(1767225600_000000000)
	for i := range uint64(count) {
		size, _ := gen.MixIMIX.Size(i, nil)
		if i%40 == 39 {
			size = 9000
		}
		frame := gen.Frame(buf[:size], gen.LinkTypeEthernet, uint32(stream), i)
		ts += 1000
		if err := w.WritePacket(ts, uint32(len(frame)), frame); err != nil {
			t.Fatal(err)
		}
		if frame := wire.HeaderSize + wire.BatchHeaderSize + size + 1 + wire.TrailerSize; frame > room {
			pieces += wire.PieceCount(frame, room-wire.PieceOverhead)
		} else {
			small += size
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	return uint64(pieces + small/room)
}

// nft runs nft in namespace ns; with "-f", "-" the last argument is
// its input.
func nft(t *testing.T, ns string, args ...string) {
	t.Helper()
	var stdin string
	if len(args) == 3 && args[0] == "-f" && args[1] == "-" {
		stdin, args = args[2], args[:2]
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// nftCounter returns the packets of named counter name of table ip pcs.
func nftCounter(t *testing.T, ns, name string) uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-j", "list", "counter", "ip", "pcs", name).Output()
	if err != nil {
		t.Fatalf("nft list counter %s: %v", name, err)
	}
	var v struct {
		Nftables []struct {
			Counter *struct{ Packets uint64 } `json:"counter"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("nft counter %s: %v: %s", name, err, out)
	}
	for _, o := range v.Nftables {
		if o.Counter != nil {
			return o.Counter.Packets
		}
	}
	t.Fatalf("nft counter %s not listed: %s", name, out)
	return 0
}

// ruleHandle returns the handle of the rule of chain ip pcs loss whose
// comment is comment.
func ruleHandle(t *testing.T, ns, comment string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "nft", "-a", "list", "chain", "ip", "pcs", "loss").Output()
	if err != nil {
		t.Fatalf("nft list chain: %v", err)
	}
	m := regexp.MustCompile(`comment "` + regexp.QuoteMeta(comment) + `" # handle (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no rule with comment %q:\n%s", comment, out)
	}
	return string(m[1])
}
