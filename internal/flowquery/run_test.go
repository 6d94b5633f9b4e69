package flowquery

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// sums are a conversation's counts as one agent saw it: [0] the
// initiator's.
type sums struct {
	packets, bytes [2]uint64
	first, last    int64
}

type fixture struct {
	dir   string
	convs []flowtest.Conv
	ps    []flowtest.Packet
	files map[string][]string
	want  map[[2]string]*sums // agent, Community ID
	cid   []string            // of each conversation
}

// newFixture writes a root of two agents: a sees every conversation
// (97 packets a file), b the even ones (50 a file), records split every
// 10 packets.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	fx := &fixture{dir: t.TempDir(), convs: flowtest.GenConvs(1, 50)}
	fx.ps = flowtest.GenPackets(fx.convs)
	agents := []flowtest.Agent{
		{Name: "a", Iface: "a:eth0", PerFile: 97},
		{Name: "b", Iface: "b:eth1", PerFile: 50, Keep: func(c int) bool { return c%2 == 0 }},
	}
	fx.files = flowtest.WriteRoot(t, fx.dir, fx.ps, agents, &flow.Config{SplitPackets: 10})
	fx.cid = make([]string, len(fx.convs))
	for _, p := range fx.ps {
		if fx.cid[p.C] == "" {
			var k flow.Key
			flow.Decode(&k, flow.LinkEthernet, 0, p.Frame)
			fx.cid[p.C] = k.CommunityID(0)
		}
	}
	fx.want = map[[2]string]*sums{}
	for _, a := range agents {
		for _, p := range fx.ps {
			if a.Keep != nil && !a.Keep(p.C) {
				continue
			}
			k := [2]string{a.Name, fx.cid[p.C]}
			s := fx.want[k]
			if s == nil {
				s = &sums{first: p.TS}
				fx.want[k] = s
			}
			d := 1
			if p.Init {
				d = 0
			}
			s.packets[d]++
			s.bytes[d] += uint64(len(p.Frame))
			s.last = p.TS
		}
	}
	return fx
}

func run(t *testing.T, cfg Config) ([]Flow, Result) {
	t.Helper()
	fs, res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fs, res
}

// TestRunJoins: every conversation is one flow per agent that saw it,
// its records joined across splits and files, with the packets and bytes
// per direction and the times of the packets generated.
func TestRunJoins(t *testing.T) {
	fx := newFixture(t)
	got, res := run(t, Config{Dir: fx.dir})
	if res.Missing != 0 || len(res.Damaged) != 0 || res.Files != len(fx.files["a"])+len(fx.files["b"]) {
		t.Fatalf("result %+v", res)
	}
	if len(got) != len(fx.want) {
		t.Errorf("%d flows, want %d", len(got), len(fx.want))
	}
	joined := 0
	seen := map[[2]string]bool{}
	for _, f := range got {
		k := [2]string{f.Agent, f.CommunityID}
		w := fx.want[k]
		if w == nil || seen[k] {
			t.Errorf("flow %s %s not expected (or twice)", f.Agent, f.CommunityID)
			continue
		}
		seen[k] = true
		if f.Packets != w.packets || f.Bytes != w.bytes || f.First != w.first || f.Last != w.last {
			t.Errorf("%v: packets %v bytes %v %d..%d, want %v %v %d..%d", k, f.Packets, f.Bytes, f.First, f.Last, w.packets, w.bytes, w.first, w.last)
		}
		if want := f.Agent + ":eth" + map[string]string{"a": "0", "b": "1"}[f.Agent]; f.Iface != want {
			t.Errorf("%v: iface %q, want %q", k, f.Iface, want)
		}
		if len(f.Parts) > 1 {
			joined++
		}
	}
	if joined == 0 {
		t.Error("no flow joined from several records")
	}
}

// TestRunFilter: a flow is selected when the filter passes the packets
// its initiator sent (doc.go): for each filter, exactly the flows of which
// libpcap passes an initiator's packet.
func TestRunFilter(t *testing.T) {
	fx := newFixture(t)
	for _, expr := range []string{
		"host 10.0.0.3", "src host 10.0.0.3", "dst host 10.0.0.3", "host 192.168.1.2",
		"dst host 192.168.1.2", "src host 192.168.1.2", "port 443", "src port 443", "dst port 443",
		"tcp", "udp", "icmp", "icmp6", "ip6", "net 10.0.0.0/29", "src net 2001:db8::/32",
		"vlan", "vlan 101", "vlan and host 10.0.0.6", "tcp and dst port 5432 or udp",
		"not port 53", "ip6 and tcp", "proto 17", "tcp dst port 80",
	} {
		t.Run(expr, func(t *testing.T) {
			flt, err := filter.New(expr)
			if err != nil {
				t.Fatal(err)
			}
			want := map[[2]string]bool{}
			for _, p := range fx.ps {
				if ok, _ := flt.Match(1, p.Frame, uint32(len(p.Frame))); ok && p.Init {
					want[[2]string{"a", fx.cid[p.C]}] = true
					if p.C%2 == 0 {
						want[[2]string{"b", fx.cid[p.C]}] = true
					}
				}
			}
			got, _ := run(t, Config{Dir: fx.dir, Filter: expr})
			if len(got) != len(want) {
				t.Errorf("%d flows, want %d", len(got), len(want))
			}
			for _, f := range got {
				if !want[[2]string{f.Agent, f.CommunityID}] {
					t.Errorf("flow %s %s %v selected", f.Agent, f.CommunityID, f.Key.SrcAddr())
				}
			}
		})
	}
}

// TestRunSelect: agents, interfaces and a time range (a flow overlapping
// it).
func TestRunSelect(t *testing.T) {
	fx := newFixture(t)
	since, until := flowtest.Base+40e6, flowtest.Base+60e6
	tests := []struct {
		name string
		cfg  Config
		keep func(agent string, s *sums) bool
	}{
		{"agent", Config{Agents: []string{"b"}}, func(a string, _ *sums) bool { return a == "b" }},
		{"agent glob", Config{Agents: []string{"[a]*"}}, func(a string, _ *sums) bool { return a == "a" }},
		{"iface", Config{Ifaces: []string{"eth1"}}, func(a string, _ *sums) bool { return a == "b" }},
		{"agent:iface", Config{Ifaces: []string{"a:eth*"}}, func(a string, _ *sums) bool { return a == "a" }},
		{"no iface", Config{Ifaces: []string{"a:eth1"}}, func(string, *sums) bool { return false }},
		{"range", Config{Since: time.Unix(0, since), Until: time.Unix(0, until)},
			func(_ string, s *sums) bool { return s.last >= since && s.first < until }},
		{"since", Config{Since: time.Unix(0, since)}, func(_ string, s *sums) bool { return s.last >= since }},
		{"until", Config{Until: time.Unix(0, until)}, func(_ string, s *sums) bool { return s.first < until }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Dir = fx.dir
			got, _ := run(t, tc.cfg)
			n := 0
			for k, s := range fx.want {
				if tc.keep(k[0], s) {
					n++
				}
			}
			if len(got) != n {
				t.Errorf("%d flows, want %d", len(got), n)
			}
			for _, f := range got {
				if !tc.keep(f.Agent, fx.want[[2]string{f.Agent, f.CommunityID}]) {
					t.Errorf("flow %s %s %d..%d selected", f.Agent, f.CommunityID, f.First, f.Last)
				}
			}
		})
	}
}

// TestRunHostile: a flow file that does not verify, is a link, a FIFO, or
// is missing is reported and skipped; the other files' flows are returned.
func TestRunHostile(t *testing.T) {
	tests := []struct {
		name    string
		spoil   func(t *testing.T, p string)
		missing bool
	}{
		{"flipped byte", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			b[len(b)/2] ^= 0x40
			os.WriteFile(p, b, 0o644)
		}, false},
		{"truncated", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-3], 0o644)
		}, false},
		{"garbage", func(t *testing.T, p string) { os.WriteFile(p, []byte("PSFL\x01\x00\xff\xff"), 0o644) }, false},
		{"version", func(t *testing.T, p string) {
			b, _ := os.ReadFile(p)
			b[4] = 9
			os.WriteFile(p, b, 0o644)
		}, false},
		{"link", func(t *testing.T, p string) {
			os.Rename(p, p+".real")
			if err := os.Symlink(filepath.Base(p)+".real", p); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"missing", func(t *testing.T, p string) { os.Remove(p) }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFixture(t)
			all, _ := run(t, Config{Dir: fx.dir, Agents: []string{"a"}})
			tc.spoil(t, flow.Path(fx.files["a"][1]))
			got, res := run(t, Config{Dir: fx.dir, Agents: []string{"a"}})
			if tc.missing {
				if res.Missing != 1 || len(res.Damaged) != 0 {
					t.Errorf("result %+v, want one missing", res)
				}
			} else if len(res.Damaged) != 1 || !strings.Contains(res.Damaged[0], filepath.Base(fx.files["a"][1])) {
				t.Errorf("damaged %q, want the second file's", res.Damaged)
			}
			if len(got) == 0 || len(got) >= len(all)+10 {
				t.Errorf("%d flows (whole: %d)", len(got), len(all))
			}
		})
	}
}

// TestRunMaxFlows: past the bound, a clear error.
func TestRunMaxFlows(t *testing.T) {
	fx := newFixture(t)
	if _, _, err := Run(context.Background(), Config{Dir: fx.dir, MaxFlows: 10}); !errors.Is(err, ErrTooManyFlows) {
		t.Fatalf("err %v, want ErrTooManyFlows", err)
	}
	if _, _, err := Run(context.Background(), Config{Dir: fx.dir, MaxFlows: len(fx.want)}); err != nil {
		t.Fatalf("at the bound: %v", err)
	}
}

// TestRunConfig: usage errors.
func TestRunConfig(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cfg  Config
		want error
	}{
		{Config{}, ErrConfig},
		{Config{Dir: filepath.Join(dir, "none")}, ErrConfig},
		{Config{Dir: dir, Agents: []string{"["}}, ErrConfig},
		{Config{Dir: dir, Since: time.Unix(2, 0), Until: time.Unix(1, 0)}, ErrConfig},
		{Config{Dir: dir, Filter: "host"}, ErrBadFilter},
		{Config{Dir: dir, MaxFlows: -1}, ErrConfig},
		// Times int64 nanoseconds do not hold (UnixNano would wrap and
		// select what it likes), as query's Validate refuses them.
		{Config{Dir: dir, Since: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}, ErrConfig},
		{Config{Dir: dir, Until: time.Date(2262, 4, 12, 0, 0, 0, 0, time.UTC)}, ErrConfig},
		{Config{Dir: dir, Since: time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)}, ErrConfig},
		{Config{Dir: dir, Since: time.Unix(0, math.MinInt64), Until: time.Unix(0, math.MaxInt64)}, nil},
	} {
		if _, _, err := Run(context.Background(), tc.cfg); !errors.Is(err, tc.want) {
			t.Errorf("%+v: err %v, want %v", tc.cfg, err, tc.want)
		}
	}
}

// TestGroup: the same conversation seen by two agents is one group.
func TestGroup(t *testing.T) {
	fx := newFixture(t)
	got, _ := run(t, Config{Dir: fx.dir})
	gs := Group(got)
	if len(gs) != len(fx.convs) {
		t.Fatalf("%d groups, want %d", len(gs), len(fx.convs))
	}
	for _, g := range gs {
		want := 1
		if g[0].CommunityID == fx.cid[0] || strings.Contains(strings.Join(evenCIDs(fx), " "), g[0].CommunityID) {
			want = 2
		}
		if len(g) != want {
			t.Errorf("group %s: %d flows, want %d", g[0].CommunityID, len(g), want)
		}
	}
}

func evenCIDs(fx *fixture) []string {
	var s []string
	for i := 0; i < len(fx.cid); i += 2 {
		s = append(s, fx.cid[i])
	}
	return s
}

// TestRunPart: a data file being written is read (its flow file's
// records that verify, a torn tail left out) and listed in Unflowed,
// for a reader of its blocks to read it whole.
func TestRunPart(t *testing.T) {
	fx := newFixture(t)
	last := fx.files["a"][len(fx.files["a"])-1]
	part := last + ".part"
	for _, r := range [][2]string{{last, part}, {flow.Path(last), flow.Path(part)}} {
		if err := os.Rename(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(flow.Path(part))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flow.Path(part), b[:len(b)-5], 0o644); err != nil { // torn: the end record cut
		t.Fatal(err)
	}
	got, res := run(t, Config{Dir: fx.dir, Agents: []string{"a"}})
	if len(res.Damaged) != 0 || len(res.Unflowed) != 1 || res.Unflowed[0] != part {
		t.Errorf("result %+v, want the .part unflowed, nothing damaged", res)
	}
	fromPart := 0
	for _, f := range got {
		for _, p := range f.Parts {
			if p.File == part {
				fromPart++
			}
		}
	}
	if fromPart == 0 {
		t.Error("no record read from the .part's flow file")
	}
}

// TestRunForeignIfaceNames: files the store did not write, whose
// interfaces are named without the agent ("eth0" in both agents'), give
// each agent's flows on its own interface, "a:eth0" and "b:eth0", and
// --iface selects them as it does the store's (the query names them the
// same: layout.IfaceName).
func TestRunForeignIfaceNames(t *testing.T) {
	dir := t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(1, 10))
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "a", Iface: "eth0", PerFile: 40}, {Name: "b", Iface: "eth0", PerFile: 40}}, &flow.Config{})
	for _, c := range []struct {
		ifaces []string
		agents []string
	}{{nil, []string{"a", "b"}}, {[]string{"eth0"}, []string{"a", "b"}}, {[]string{"b:eth0"}, []string{"b"}}} {
		got, _ := run(t, Config{Dir: dir, Ifaces: c.ifaces})
		seen := map[string]int{}
		for _, f := range got {
			if f.Iface != f.Agent+":eth0" {
				t.Errorf("--iface %v: a flow of %s on %q, want %s:eth0", c.ifaces, f.Agent, f.Iface, f.Agent)
			}
			seen[f.Agent]++
		}
		if len(seen) != len(c.agents) || slices.ContainsFunc(c.agents, func(a string) bool { return seen[a] != 10 }) {
			t.Errorf("--iface %v: flows by agent %v, want 10 of each of %v", c.ifaces, seen, c.agents)
		}
	}
}
