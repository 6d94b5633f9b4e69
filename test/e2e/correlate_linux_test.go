//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/correlate"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/testutil/netns"
)

// The router's nftables for the correlation: in the forward hook, count
// the test's datagrams, and drop 5% of them at random, counted.
const correlateRules = `table ip pcs {
	counter seen {}
	counter dropped {}
	chain loss {
		type filter hook forward priority 0; policy accept;
		udp dport %[1]d counter name seen
		udp dport %[1]d numgen random mod 100 < 5 counter name dropped drop
	}
}
`

// TestCorrelateFindsRouterDrops: two agents capture either side of a
// router namespace that drops 5% of a bounded UDP stream of unique
// datagrams (nftables, counted); a collector writes their files.
// pcapsync correlate reports exactly the packets dropped: as many as
// the router's counter, and its unmatched pcapng holds exactly the
// datagrams the first agent saw and the second did not, by their
// generated sequence numbers, with the first agent's interface and
// timestamps.
func TestCorrelateFindsRouterDrops(t *testing.T) {
	requireRoot(t)
	requireTools(t, "ip", "nft")
	ch := netns.NewChain(t, "pcscorr", 1500)
	const port, count, stream = 9999, 2000, 16
	nft(t, ch.R, "-f", "-", fmt.Sprintf(correlateRules, port))
	ctx := testContext(t)
	udpSink(t, ch.C, netip.AddrPortFrom(netns.ChainAddrC, port))

	dir := t.TempDir()
	cport := freeport.Port(t)
	coll := startCollector(t, ctx, ch.A, fmt.Sprintf("0.0.0.0:%d", cport), dir)
	filter := fmt.Sprintf("udp port %d", port)
	agentA := startProc(t, ctx, "agent a", ch.A, "agent", "--collector", fmt.Sprintf("127.0.0.1:%d", cport),
		"--name", "a", "--iface", "a0", "--filter", filter)
	agentC := startProc(t, ctx, "agent c", ch.C, "agent", "--collector", fmt.Sprintf("%s:%d", netns.ChainAddrA, cport),
		"--name", "c", "--iface", "c0", "--filter", filter)
	// An agent opens its capture before it connects.
	coll.waitSessions(2, 15*time.Second)

	g := startProc(t, ctx, "gen", ch.A, "gen", "udp", "--to", fmt.Sprintf("%s:%d", netns.ChainAddrC, port),
		"--count", fmt.Sprint(count), "--rate", "2000", "--stream", fmt.Sprint(stream))
	if code := g.wait(20 * time.Second); code != 0 || !strings.Contains(g.stdout.String(), fmt.Sprintf("sent %d datagrams", count)) {
		t.Fatalf("gen exited with code %d: %s", code, g.stdout.String())
	}
	for _, a := range []*proc{agentA, agentC} {
		a.stop(20 * time.Second)
	}
	coll.stop(20 * time.Second)
	seen, dropped := nftCounter(t, ch.R, "seen"), nftCounter(t, ch.R, "dropped")
	for _, a := range []*proc{agentA, agentC} {
		if s := a.summary(); s.KernelDrops != 0 || s.Dropped != 0 || s.Unacked != 0 {
			t.Fatalf("%s summary %+v: the capture lost packets, the test cannot tell the router's drops", a.name, s)
		}
	}
	if seen != count || dropped == 0 || dropped >= count/10 {
		t.Fatalf("router: %d datagrams seen, %d dropped; want %d seen and some (5%%) dropped", seen, dropped, count)
	}

	// What each side captured, by the generator's sequence numbers.
	atA := seqsTS(t, filepath.Join(dir, "a"), stream)
	atC := seqsTS(t, filepath.Join(dir, "c"), stream)
	if len(atA) != count {
		t.Fatalf("agent a captured %d of the %d datagrams", len(atA), count)
	}
	var missing []uint64
	for s := range atA {
		if _, ok := atC[s]; !ok {
			missing = append(missing, s)
		}
	}
	slices.Sort(missing)
	if uint64(len(missing)) != dropped || len(atC) != count-len(missing) {
		t.Fatalf("agent c lacks %d datagrams and holds %d, the router dropped %d", len(missing), len(atC), dropped)
	}

	out := filepath.Join(t.TempDir(), "unmatched.pcapng")
	cor := startProc(t, ctx, "correlate", "", "correlate", "--dir", dir, "--agent", "a", "--agent", "c",
		"--json", "-w", out, "udp", "port", fmt.Sprint(port))
	if code := cor.wait(30 * time.Second); code != 0 {
		t.Fatalf("correlate exited with code %d: %s", code, cor.stderr.String())
	}
	var rep correlate.Report
	if err := json.Unmarshal([]byte(cor.stdout.String()), &rep); err != nil {
		t.Fatalf("correlate --json: %v: %s", err, cor.stdout.String())
	}
	d := int64(dropped)
	want := correlate.Pair{From: "a", To: "c", AtFrom: count, AtTo: count - d, Matched: count - d, FromNotTo: d}
	got := rep.Pairs[0]
	delay := got.Delay
	got.Delay = correlate.Delay{}
	if len(rep.Pairs) != 1 || got != want || rep.Unmatched != d {
		t.Errorf("correlate: pairs %+v, %d unmatched written; want %+v (the router dropped %d)", rep.Pairs, rep.Unmatched, want, dropped)
	}
	// One host's clock: the delay is the path's, a few microseconds to
	// milliseconds, never negative.
	if delay.Count != count-d || delay.Min < 0 || delay.Max > int64(time.Second) {
		t.Errorf("delay %+v: want %d delays in [0, 1s)", delay, count-d)
	}

	pkts, ifs := readAll(t, out)
	var unmatched []uint64
	for _, p := range pkts {
		_, seq, ok, err := gen.Parse(p.Data, gen.LinkTypeEthernet)
		if !ok || err != nil {
			t.Fatalf("unmatched packet is not a generated datagram: %v %x", err, p.Data)
		}
		if name := ifs[p.Interface].Name; name != "a:a0" || p.Timestamp != atA[seq] {
			t.Errorf("unmatched seq %d on %q at %d, want on a:a0 at %d", seq, name, p.Timestamp, atA[seq])
		}
		unmatched = append(unmatched, seq)
	}
	if !slices.Equal(unmatched, missing) {
		t.Errorf("unmatched pcapng holds seqs %v,\nwant the %d missing at c: %v", unmatched, len(missing), missing)
	}
	t.Logf("router dropped %d of %d; correlate: %+v, delay %+v", dropped, seen, got, delay)
}

// seqsTS reads an agent directory's files: the timestamp of each
// generated datagram of stream, by sequence number; a datagram twice
// fails the test.
func seqsTS(t *testing.T, dir string, stream uint32) map[uint64]int64 {
	t.Helper()
	out := map[uint64]int64{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if besideFile(e.Name()) {
			continue
		}
		pkts, _ := readAll(t, filepath.Join(dir, e.Name()))
		for _, p := range pkts {
			st, seq, ok, err := gen.Parse(p.Data, gen.LinkTypeEthernet)
			if err != nil || !ok || st != stream {
				t.Fatalf("%s: a packet not of stream %d: %v %x", dir, stream, err, p.Data)
			}
			if _, dup := out[seq]; dup {
				t.Fatalf("%s: seq %d twice", dir, seq)
			}
			out[seq] = p.Timestamp
		}
	}
	return out
}
