package flowquery

import (
	"cmp"
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// TestRunTies: flows of one agent and interface that began in the same
// nanosecond, all still going when the agent's last file ends (held
// waiting for a next part until then), come in one order, by key, in
// every Run: a page of the console sorted by any column stays the same
// from one request to the next.
func TestRunTies(t *testing.T) {
	dir := t.TempDir()
	var convs []flowtest.Conv
	for i := range 40 {
		convs = append(convs, flowtest.Conv{Proto: flow.ProtoUDP, Src: netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}),
			Dst: netip.AddrFrom4([4]byte{10, 0, 2, byte(i % 3)}), Sport: uint16(40000 + i), Dport: 53, N: 4})
	}
	ps := flowtest.GenPackets(convs)
	seen := map[int]bool{}
	for i := range ps { // every conversation's first packet at one time
		if !seen[ps[i].C] {
			seen[ps[i].C], ps[i].TS = true, flowtest.Base
		}
	}
	slices.SortStableFunc(ps, func(a, b flowtest.Packet) int { return cmp.Compare(a.TS, b.TS) })
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 1000}}, &flow.Config{})
	var first []Flow
	for run := range 8 {
		flows, _, err := Run(context.Background(), Config{Dir: dir})
		if err != nil || len(flows) != len(convs) {
			t.Fatalf("Run: %d flows, %v", len(flows), err)
		}
		for i := range flows {
			if flows[i].First != flowtest.Base {
				t.Fatalf("flow %d began at %d, not with the others", i, flows[i].First)
			}
			if i > 0 && compareKeys(&flows[i-1].Key, &flows[i].Key) >= 0 {
				t.Fatalf("run %d: flow %d (%s) not after flow %d (%s) by key", run, i, flows[i].CommunityID, i-1, flows[i-1].CommunityID)
			}
		}
		if run == 0 {
			first = flows
			continue
		}
		for i := range flows {
			if flows[i].CommunityID != first[i].CommunityID {
				t.Fatalf("run %d: flow %d is %s, %s in the first run", run, i, flows[i].CommunityID, first[i].CommunityID)
			}
		}
	}
}
