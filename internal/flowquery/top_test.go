package flowquery

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// topRoot writes a root of three agents seeing overlapping sets of 120
// conversations (TCP, UDP, ICMP, IPv4 and IPv6, VLANs; records split
// every 10 packets and flows spanning files), a host talking to itself
// and ARP (traffic that is not IP), and returns it with each agent's
// interface.
func topRoot(t *testing.T) (string, map[string]string) {
	t.Helper()
	dir := t.TempDir()
	convs := flowtest.GenConvs(7, 120)
	self := netip.AddrFrom4([4]byte{10, 0, 0, 9})
	convs = append(convs, flowtest.Conv{Proto: flow.ProtoUDP, Src: self, Dst: self, Sport: 999, Dport: 53, N: 6})
	ps := flowtest.GenPackets(convs)
	for i := range 12 { // ARP between two MACs, both ways
		f := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, byte(1 + i%2), 0x08, 0x06}
		ps = append(ps, flowtest.Packet{TS: flowtest.Base + int64(i)*7e6, C: len(convs) + i%2, Init: i%2 == 0, Frame: append(f, make([]byte, 28)...)})
	}
	slices.SortStableFunc(ps, func(a, b flowtest.Packet) int { return cmp.Compare(a.TS, b.TS) })
	agents := []flowtest.Agent{
		{Name: "a", Iface: "a:eth0", PerFile: 97},
		{Name: "b", Iface: "b:eth1", PerFile: 50, Keep: func(c int) bool { return c%2 == 0 }},
		{Name: "c", Iface: "c:eth0", PerFile: 33, Keep: func(c int) bool { return c%3 != 1 }},
	}
	flowtest.WriteRoot(t, dir, ps, agents, &flow.Config{SplitPackets: 10})
	ifaces := map[string]string{}
	for _, a := range agents {
		ifaces[a.Name] = a.Iface
	}
	return dir, ifaces
}

// refFlow is a flow as the reference joins it.
type refFlow struct {
	Agent, Iface string
	Key          flow.Key
	First, Last  int64
	Packets      [2]uint64
	Bytes        [2]uint64
	Captured     [2]uint64
	TCPFlags     [2]uint8
	End          flow.End
	Flags        uint8
	Part         uint32
	Parts        int
}

func refOf(f *Flow) refFlow {
	r := refFlow{Agent: f.Agent, Iface: f.Iface, Key: f.Key, First: f.First, Last: f.Last, Packets: f.Packets, Bytes: f.Bytes,
		Captured: f.Captured, TCPFlags: f.TCPFlags, End: f.End, Flags: f.Flags, Part: f.Part, Parts: len(f.Parts)}
	r.Key.Iface = 0
	return r
}

// refRun is the reference for Run: every flow file parsed whole, file
// after file per agent, a record ending open or split joined with the
// next of its key and part, the flows overlapping [since, until) kept.
func refRun(t *testing.T, dir string, ifaces map[string]string, since, until int64, keep func(k *flow.Key) bool) []refFlow {
	t.Helper()
	var out []refFlow
	for agent, iface := range ifaces {
		ents, err := os.ReadDir(filepath.Join(dir, agent))
		if err != nil {
			t.Fatal(err)
		}
		pending := map[flow.Key]*refFlow{}
		for _, e := range ents {
			if !strings.HasSuffix(e.Name(), ".pcapng") {
				continue
			}
			b, err := os.ReadFile(flow.Path(filepath.Join(dir, agent, e.Name())))
			if err != nil {
				t.Fatal(err)
			}
			ff, err := flow.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range ff.Records {
				if !keep(&r.Key) {
					continue
				}
				k := r.Key
				k.Iface = 0
				f := pending[k]
				delete(pending, k)
				if f != nil && r.Part != f.Part+1 {
					out = append(out, *f)
					f = nil
				}
				if f == nil {
					f = &refFlow{Agent: agent, Iface: iface, Key: k, First: r.First, Last: r.Last}
				}
				f.First, f.Last = min(f.First, r.First), max(f.Last, r.Last)
				for d := range 2 {
					f.Packets[d] += r.Packets[d]
					f.Bytes[d] += r.Bytes[d]
					f.Captured[d] += r.Captured[d]
					f.TCPFlags[d] |= r.TCPFlags[d]
				}
				f.End, f.Part, f.Flags, f.Parts = r.End, r.Part, f.Flags|r.Flags, f.Parts+1
				if r.End == flow.EndOpen || r.End == flow.EndSplit {
					pending[k] = f
					continue
				}
				out = append(out, *f)
			}
		}
		for _, f := range pending {
			out = append(out, *f)
		}
	}
	return slices.DeleteFunc(out, func(f refFlow) bool { return f.Last < since || f.First >= until })
}

// refTop is the reference for Top: a name per group and flow, summed.
func refTop(fs []refFlow, group, measure string, n int) []Talker {
	ep := func(k flow.Key, src bool) string {
		k.Flags &^= flow.FlagPorts
		return Endpoint(&k, src)
	}
	sums := map[string]*Talker{}
	for _, f := range fs {
		var keys []string
		switch group {
		case GroupHost:
			keys = []string{ep(f.Key, true)}
			if b := ep(f.Key, false); b != keys[0] {
				keys = append(keys, b)
			}
		case GroupPair:
			a, b := ep(f.Key, true), ep(f.Key, false)
			if bytes.Compare(f.Key.Src[:], f.Key.Dst[:]) > 0 {
				a, b = b, a
			}
			keys = []string{a + " <-> " + b}
		case GroupPort:
			p := ProtoName(&f.Key)
			if f.Key.Flags&flow.FlagPorts != 0 {
				p += "/" + strconv.Itoa(int(f.Key.DstPort))
			}
			keys = []string{p}
		case GroupAgent:
			keys = []string{f.Agent}
		}
		for _, k := range keys {
			if sums[k] == nil {
				sums[k] = &Talker{Key: k}
			}
			sums[k].Flows++
			sums[k].Packets += f.Packets[0] + f.Packets[1]
			sums[k].Bytes += f.Bytes[0] + f.Bytes[1]
		}
	}
	var out []Talker
	for _, t := range sums {
		out = append(out, *t)
	}
	val := map[string]func(t Talker) uint64{
		ByBytes:   func(t Talker) uint64 { return t.Bytes },
		ByPackets: func(t Talker) uint64 { return t.Packets },
		ByFlows:   func(t Talker) uint64 { return t.Flows },
	}[measure]
	slices.SortFunc(out, func(a, b Talker) int { return cmp.Or(cmp.Compare(val(b), val(a)), cmp.Compare(a.Key, b.Key)) })
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

func sortRefs(fs []refFlow) {
	slices.SortFunc(fs, func(a, b refFlow) int { return cmp.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
}

// TestTopDifferential: over a generated root, for selections with and
// without a range (flows straddling it), a filter, agents and a
// Community ID, Run's flows equal the reference's (each flow file parsed
// whole and joined), every --sort orders them and --same groups them by
// Community ID, and RunTop (summed while reading) and Top (over Run's
// flows) equal the reference's sums for every group, measure and n.
func TestTopDifferential(t *testing.T) {
	dir, ifaces := topRoot(t)
	since, until := flowtest.Base+150e6, flowtest.Base+260e6
	all := func(*flow.Key) bool { return true }
	cases := []struct {
		name string
		cfg  Config
		keep func(k *flow.Key) bool
	}{
		{"all", Config{}, all},
		{"range", Config{Since: time.Unix(0, since), Until: time.Unix(0, until)}, all},
		{"since", Config{Since: time.Unix(0, since)}, all},
		{"filter", Config{Filter: "udp or port 443"}, func(k *flow.Key) bool {
			return k.NVLAN == 0 && (k.Proto == flow.ProtoUDP && k.Kind != flow.KindLink || k.Flags&flow.FlagPorts != 0 && k.Proto == flow.ProtoTCP && (k.SrcPort == 443 || k.DstPort == 443))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Dir = dir
			lo, hi := tc.cfg.bounds()
			want := refRun(t, dir, ifaces, lo, hi, tc.keep)
			flows, _ := run(t, tc.cfg)
			checkRun(t, flows, want)
			for _, g := range []string{GroupHost, GroupPair, GroupPort, GroupAgent} {
				for _, by := range []string{ByBytes, ByPackets, ByFlows} {
					for _, n := range []int{0, 1, 3, 10} {
						w := refTop(want, g, by, n)
						got, _, err := RunTop(context.Background(), tc.cfg, g, by, n)
						if err != nil {
							t.Fatal(err)
						}
						if !reflect.DeepEqual(got, w) {
							t.Errorf("RunTop %s by %s %d:\n%v\nwant\n%v", g, by, n, got, w)
						}
						if got, _ := Top(flows, g, by, n); !reflect.DeepEqual(got, w) {
							t.Errorf("Top %s by %s %d:\n%v\nwant\n%v", g, by, n, got, w)
						}
					}
				}
			}
		})
	}
}

// checkRun compares Run's flows with the reference's, in Run's order and
// in each --sort and --same.
func checkRun(t *testing.T, flows []Flow, want []refFlow) {
	t.Helper()
	if len(want) < 20 {
		t.Fatalf("only %d flows: the root is too small to say anything", len(want))
	}
	got := make([]refFlow, len(flows))
	for i := range flows {
		got[i] = refOf(&flows[i])
		if c := flows[i].Key.CommunityID(0); flows[i].CommunityID != c {
			t.Errorf("flow %d: Community ID %q, want %q", i, flows[i].CommunityID, c)
		}
	}
	sortRefs(got)
	sortRefs(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Run's %d flows differ from the reference's %d", len(got), len(want))
	}
	order := map[string]func(a, b *Flow) int{
		"first": func(a, b *Flow) int {
			return cmp.Or(cmp.Compare(a.First, b.First), strings.Compare(a.Agent, b.Agent), strings.Compare(a.Iface, b.Iface))
		},
		"last":     func(a, b *Flow) int { return cmp.Compare(a.Last, b.Last) },
		"bytes":    func(a, b *Flow) int { return cmp.Compare(b.TotalBytes(), a.TotalBytes()) },
		"packets":  func(a, b *Flow) int { return cmp.Compare(b.TotalPackets(), a.TotalPackets()) },
		"duration": func(a, b *Flow) int { return cmp.Compare(b.Last-b.First, a.Last-a.First) },
	}
	for key, by := range order {
		fs := slices.Clone(flows)
		if err := Sort(fs, key); err != nil {
			t.Fatal(err)
		}
		if !slices.IsSortedFunc(fs, func(a, b Flow) int { return by(&a, &b) }) {
			t.Errorf("--sort %s: not in order", key)
		}
	}
	n := 0
	for _, g := range Group(flows) {
		n += len(g)
		for _, f := range g[1:] {
			if f.CommunityID == "" || f.CommunityID != g[0].CommunityID {
				t.Errorf("--same: %s/%s grouped with %s/%s", f.Agent, f.CommunityID, g[0].Agent, g[0].CommunityID)
			}
		}
	}
	if n != len(flows) {
		t.Errorf("--same: %d flows in the groups, want %d", n, len(flows))
	}
}
