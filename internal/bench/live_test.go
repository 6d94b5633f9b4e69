package bench

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

func TestParseTcpdumpStats(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     tcpdumpStats
		ok       bool
	}{
		{"usual", "tcpdump: listening on vA, link-type EN10MB (Ethernet), snapshot length 262144 bytes\n^C1000 packets captured\n1200 packets received by filter\n200 packets dropped by kernel\n",
			tcpdumpStats{Captured: 1000, Received: 1200, KernelDrops: 200}, true},
		{"no drops", "5 packets captured\n5 packets received by filter\n0 packets dropped by kernel\n", tcpdumpStats{Captured: 5, Received: 5}, true},
		{"interface drops line too", "5 packets captured\n5 packets received by filter\n0 packets dropped by kernel\n3 packets dropped by interface\n", tcpdumpStats{Captured: 5, Received: 5}, true},
		{"killed", "tcpdump: listening on vA\n", tcpdumpStats{}, false},
		{"partial", "5 packets captured\n", tcpdumpStats{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTcpdumpStats(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseGenSent(t *testing.T) {
	if n, err := parseGenSent("sent 981888 datagrams to 198.18.0.1:5555\n"); err != nil || n != 981888 {
		t.Errorf("got %d, %v", n, err)
	}
	if _, err := parseGenSent("pcapsync: context canceled\n"); err == nil {
		t.Error("no error without a sent line")
	}
}

func liveRun(tdDrops, agentDrops uint64, agentCPU, tdCPU time.Duration) LiveRun {
	return LiveRun{Sent: 1_000_000, Sending: time.Second, IfRx: 1_000_002,
		Agent:   LiveCapture{InFile: 1_000_000 - agentDrops, KernelDrops: agentDrops},
		Tcpdump: LiveCapture{InFile: 1_000_000 - tdDrops, KernelDrops: tdDrops},
		Procs: []ProcUsage{{Name: "agent", User: agentCPU}, {Name: "collector", User: agentCPU}, {Name: "tcpdump", User: tdCPU},
			{Name: "generators", Sys: 2 * time.Second}}}
}

func TestLiveGoalAndTable(t *testing.T) {
	for _, tc := range []struct {
		name         string
		runs         []LiveRun
		met, reached bool
	}{
		{"tcpdump never drops", []LiveRun{liveRun(0, 0, time.Second, time.Second)}, false, false},
		{"met", []LiveRun{liveRun(100, 0, 200*time.Millisecond, 300*time.Millisecond), liveRun(0, 0, time.Second, 100*time.Millisecond)}, true, true},
		{"agent drops too", []LiveRun{liveRun(100, 1, 200*time.Millisecond, 300*time.Millisecond)}, false, true},
		{"agent costlier", []LiveRun{liveRun(100, 0, 400*time.Millisecond, 300*time.Millisecond)}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := LiveMixResult{Mix: gen.MixIMIX, Runs: tc.runs}
			met, reached := m.Goal().Met()
			if met != tc.met || reached != tc.reached {
				t.Errorf("goal %+v: met %v reached %v, want %v %v", m.Goal(), met, reached, tc.met, tc.reached)
			}
			var out bytes.Buffer
			if err := WriteLive(&out, LiveConfig{Generators: 2}, []LiveMixResult{m}, true); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"| mix imix, median of ", "| pcapsync agent | tcpdump -w |\n|---|---|---|\n", "| dropped by kernel |", "Live goal (issue 4) on every mix: "} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
	var out bytes.Buffer
	m := LiveMixResult{Mix: gen.Mix64, Runs: []LiveRun{liveRun(100, 0, 200*time.Millisecond, 300*time.Millisecond)}}
	if err := WriteLive(&out, LiveConfig{Generators: 2}, []LiveMixResult{m}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| dropped by kernel | 0 | 100 |",
		"| sent but not in the file | 0 | 100 |",
		"| CPU s per M packets captured | 0.200 | 0.300 |",
		"Live goal (issue 4) on every mix: met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestLiveSmoke runs the live bench for one second, 64-byte mix, one
// round: every packet sent is in the agent's file, and the namespaces
// are gone afterwards.
func TestLiveSmoke(t *testing.T) {
	requireTools(t, true, "ip", "tcpdump")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var log bytes.Buffer
	cfg := LiveConfig{Exe: pcapsyncExe(t), Duration: time.Second, Rounds: 1, Mixes: []gen.Mix{gen.Mix64}, Generators: 1, Rate: 20000, Log: &log}
	res, err := Live(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nrounds:\n%s", err, log.String())
	}
	t.Logf("rounds:\n%s", log.String())
	r := res[0].Runs[0]
	if r.Sent < 10000 || r.IfRx < r.Sent {
		t.Errorf("sent %d, interface received %d", r.Sent, r.IfRx)
	}
	if r.Agent.InFile+r.Agent.Drops() != r.Sent || r.Tcpdump.InFile+r.Tcpdump.Drops() != r.Sent {
		t.Errorf("sent %d; agent %d in file + %d dropped; tcpdump %d + %d", r.Sent, r.Agent.InFile, r.Agent.Drops(), r.Tcpdump.InFile, r.Tcpdump.Drops())
	}
	for _, p := range r.Procs {
		if p.CPU() <= 0 || p.MaxRSS <= 0 {
			t.Errorf("%s: CPU %v, peak RSS %d", p.Name, p.CPU(), p.MaxRSS)
		}
	}
	if out, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(out), "pcslive-") {
		t.Errorf("namespaces left behind: %s", out)
	}
}
