package bench

import (
	"bytes"
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/gen"
)

func TestParseAgentSummary(t *testing.T) {
	line := "pcapsync agent: " + agent.Summary{Read: 10, Sent: 9, Acked: 8, Dropped: 1, KernelDrops: 2, Unacked: 1, Reconnects: 3, RateDrops: 4}.String()
	for _, tc := range []struct {
		name, out string
		want      agent.Summary
		ok        bool
	}{
		{"alone", line + "\n", agent.Summary{Read: 10, Sent: 9, Acked: 8, Dropped: 1, KernelDrops: 2, Unacked: 1, Reconnects: 3, RateDrops: 4}, true},
		{"after logs", "level=WARN msg=x\n" + line, agent.Summary{Read: 10, Sent: 9, Acked: 8, Dropped: 1, KernelDrops: 2, Unacked: 1, Reconnects: 3, RateDrops: 4}, true},
		{"readme example", "pcapsync agent: packets read 3000, sent 3000, acknowledged 3000, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0\n",
			agent.Summary{Read: 3000, Sent: 3000, Acked: 3000}, true},
		{"compressed", "pcapsync agent: packets read 3000, sent 3000, acknowledged 3000, dropped by agent 0, dropped by kernel 0, unacknowledged 0, reconnects 0, dropped by rate limit 0, compressed 384000 to 120000 bytes (ratio 3.20)\n",
			agent.Summary{Read: 3000, Sent: 3000, Acked: 3000}, true},
		{"missing", "", agent.Summary{}, false},
		{"truncated", "pcapsync agent: packets read 3000, sent 3000", agent.Summary{}, false},
		{"bad number", strings.Replace(line, "sent 9", "sent x9", 1), agent.Summary{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseAgentSummary(tc.out)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if tc.ok && got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestGroupDigits(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1 000", 386354748: "386 354 748", -1234: "-1 234"} {
		if got := groupDigits(n); got != want {
			t.Errorf("groupDigits(%d) = %q, want %q", n, got, want)
		}
	}
}

// fakeMix is a mix result with fixed figures: pcapsync twice as fast as
// PCAP-over-IP and cheaper than tcpdump + rsync.
func fakeMix() MixResult {
	n := 1_000_000
	run := func(wall time.Duration, cpu ...time.Duration) PipelineRun {
		r := PipelineRun{Wall: wall}
		for i, c := range cpu {
			r.Procs = append(r.Procs, ProcUsage{Name: string(rune('a' + i)), User: c, MaxRSS: 10 << 20, Bytes: 1000})
		}
		return r
	}
	return MixResult{Mix: gen.MixIMIX, Packets: n, InputBytes: 370_000_000, Methods: []MethodResult{
		{Name: MethodPcapsync, Runs: []PipelineRun{run(250*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond), run(200*time.Millisecond, 200*time.Millisecond, 100*time.Millisecond)}},
		{Name: MethodPoIP, Runs: []PipelineRun{run(500*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond), run(500*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond, 100*time.Millisecond)}},
		{Name: MethodRsync, Runs: []PipelineRun{run(time.Second, 300*time.Millisecond, 300*time.Millisecond), run(time.Second, 300*time.Millisecond, 300*time.Millisecond)}},
	}}
}

func TestPipelineGoalsAndTables(t *testing.T) {
	mr := fakeMix()
	rate, rateMet, cpu, cpuMet := mr.Goals()
	// pcapsync: median of 4 M and 5 M packets/s = 4.5 M, PoIP 2 M.
	if rate != 2.25 || !rateMet || cpu != 0.35/0.6 || !cpuMet {
		t.Errorf("goals: rate %.3f %v, cpu %.3f %v", rate, rateMet, cpu, cpuMet)
	}
	var out bytes.Buffer
	if err := WritePipeline(&out, PipelineConfig{Rounds: 2}, []MixResult{mr}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| pcapsync, median of 2 | packets/s | seconds | CPU s per M packets | user / sys s per M | peak RSS | bytes written |\n|---|---|---|---|---|---|---|\n",
		"| all processes | 4.50 M | 0.225 | 0.350 |  |  | 2 000 |",
		"| a |  |  | 0.200 | 0.200 / 0.000 | 10 MiB | 1 000 |",
		"| PCAP-over-IP | 2.00 M | 2.25 | 0.300 | 1.17 | 10 MiB | 3 000 | 0.67 | 0.500 |",
		"| tcpdump -w + rsync | 1.00 M | 4.50 | 0.600 | 0.58 |",
		"Goal, mix imix: pcapsync packets/s >= 2x PCAP-over-IP: 2.25x, met",
		"Pipeline goals (issue 4) on every mix: met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	mr.Methods[0].Runs[1].Wall = time.Second // median rate now 2.5 M: 1.25x
	out.Reset()
	if err := WritePipeline(&out, PipelineConfig{Rounds: 2}, []MixResult{mr}, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "on every mix: NOT MET") || strings.Contains(out.String(), "|---|") {
		t.Errorf("plain output after a slower round:\n%s", out.String())
	}
}

// TestPipelineVs: two collector configurations compared in one run
// report the ratios of their medians, and no issue-4 goals.
func TestPipelineVs(t *testing.T) {
	mr := fakeMix()
	mr.Methods[1] = MethodResult{Name: MethodPcapsyncVs, Runs: mr.Methods[0].Runs[:1]} // 4 M packets/s, 0.4 s CPU per M
	mr.Methods = mr.Methods[:2]
	rate, cpu := mr.Vs()
	if math.Abs(rate-4.0/4.5) > 1e-9 || math.Abs(cpu-0.4/0.35) > 1e-9 {
		t.Errorf("vs: rate %.4f, cpu %.4f; want %.4f, %.4f", rate, cpu, 4.0/4.5, 0.4/0.35)
	}
	var out bytes.Buffer
	cfg := PipelineConfig{Rounds: 2, CollectorArgs: []string{"--retain-free", "0"}, VsCollectorArgs: []string{"--retain-size", "128M"}}
	if err := WritePipeline(&out, cfg, []MixResult{mr}, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"plus --retain-free 0; against (pcapsync vs) the same plus --retain-size 128M instead",
		"mix imix: pcapsync vs / pcapsync: packets/s 0.889x, CPU per packet 1.143x",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Goal,") || strings.Contains(out.String(), "issue 4") {
		t.Errorf("issue 4's goals in a comparison:\n%s", out.String())
	}
}

// TestPipelinePaired: the collector's CPU compared round by round, not
// as a ratio of medians: the rounds' ratios' median and quartiles, and
// the median difference in user CPU over the base's CPU.
func TestPipelinePaired(t *testing.T) {
	run := func(user, sys time.Duration) PipelineRun {
		return PipelineRun{Wall: time.Second, Procs: []ProcUsage{{Name: "agent", User: time.Second}, {Name: "collector", User: user, Sys: sys}}}
	}
	ms := time.Millisecond
	// Whole rounds move by far more than the difference: 100, 200 and
	// 400 ms of base CPU, each round's vs 3% more of it in user time (the
	// last 3.3%).
	base := []PipelineRun{run(50*ms, 50*ms), run(100*ms, 100*ms), run(200*ms, 200*ms), run(60*ms, 60*ms)}
	vs := []PipelineRun{run(53*ms, 50*ms), run(106*ms, 100*ms), run(212*ms, 200*ms), run(64*ms, 60*ms)}
	mr := MixResult{Mix: gen.Mix64, Packets: 1000, Methods: []MethodResult{{Name: MethodPcapsync, Runs: base}, {Name: MethodPcapsyncVs, Runs: vs}}}
	ratio, q1, q3, user := mr.Paired()
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if !near(ratio, 1.03) || !near(q1, 1.03) || !near(q3, (1.03+124.0/120)/2) || !near(user, 0.03) {
		t.Errorf("Paired = %.4f (%.4f-%.4f), user %+.4f; want 1.03 (1.03-1.0317), +0.03", ratio, q1, q3, user)
	}
	// The ratio of the medians says otherwise here: the pairing matters.
	if r := vs[0:4:4]; near(MethodResult{Runs: r}.CPUPerM(1000, 1)/MethodResult{Runs: base}.CPUPerM(1000, 1), ratio) {
		t.Errorf("ratio of medians equals the paired ratio: the test does not tell them apart")
	}
	var out bytes.Buffer
	if err := WritePipeline(&out, PipelineConfig{Rounds: 4, VsCollectorArgs: []string{"--flows=false"}}, []MixResult{mr}, false); err != nil {
		t.Fatal(err)
	}
	want := "mix 64: pcapsync vs / pcapsync: collector CPU, median of the 4 rounds' ratios 1.030x (quartiles 1.030-1.032); collector user CPU, median of the rounds' differences +3.0% of its CPU"
	if !strings.Contains(out.String(), want) {
		t.Errorf("output lacks %q:\n%s", want, out.String())
	}
	if r, _, _, _ := (MixResult{Methods: mr.Methods[:1]}).Paired(); r != 0 {
		t.Errorf("Paired without a vs method = %v, want 0", r)
	}
}

// TestPipelineFloor: the pipeline's packets/s over the copy floor's,
// in the table against pcapsync and as issue 30's goal, for pcapsync
// and for a second binary compared in the same run (--vs-exe).
func TestPipelineFloor(t *testing.T) {
	mr := fakeMix()
	floor := PipelineRun{Wall: 125 * time.Millisecond, Procs: []ProcUsage{{Name: "copy sender", User: 50 * time.Millisecond}, {Name: "copy receiver", User: 50 * time.Millisecond, Bytes: 370_000_000}}}
	mr.Methods = append(mr.Methods, MethodResult{Name: MethodFloor, Runs: []PipelineRun{floor, floor}}) // 8 M packets/s
	if got := mr.Floor(MethodPcapsync); math.Abs(got-4.5/8) > 1e-9 {
		t.Errorf("Floor = %.4f, want %.4f", got, 4.5/8)
	}
	var out bytes.Buffer
	if err := WritePipeline(&out, PipelineConfig{Rounds: 2}, []MixResult{mr}, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| copy floor | 8.00 M | 0.56 | 0.100 | 3.50 |",
		"mix imix: pcapsync packets/s over the copy floor's: 0.562x (issue 30: at least 0.7x, NOT MET)",
		"- mix imix: pcapsync packets/s over the copy floor's: 0.562x",
		"Pipeline goals (issue 4) on every mix: met",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	mr.Methods[1] = MethodResult{Name: MethodPcapsyncVs, Runs: []PipelineRun{floor}} // as fast as the floor
	mr.Methods = append(mr.Methods[:2], mr.Methods[3])
	out.Reset()
	if err := WritePipeline(&out, PipelineConfig{Rounds: 2, Exe: "/a", VsExe: "/b"}, []MixResult{mr}, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"; pcapsync runs /a, pcapsync vs runs /b",
		"mix imix: pcapsync vs / pcapsync: packets/s 1.778x",
		"mix imix: pcapsync vs packets/s over the copy floor's: 1.000x (issue 30: at least 0.7x, met)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestPipelineSmoke runs the real pipeline on 20 000 packets, one round.
func TestPipelineSmoke(t *testing.T) {
	requireTools(t, false, "tcpdump", "nc", "rsync")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var log bytes.Buffer
	cfg := PipelineConfig{Exe: pcapsyncExe(t), Packets: 20000, Rounds: 1, Log: &log}
	res, err := Pipeline(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nrounds:\n%s", err, log.String())
	}
	t.Logf("rounds:\n%s", log.String())
	if len(res) != 2 {
		t.Fatalf("%d mixes, want 2", len(res))
	}
	for _, mr := range res {
		for _, m := range mr.Methods {
			if len(m.Runs) != 1 {
				t.Fatalf("mix %s %s: %d runs", mr.Mix, m.Name, len(m.Runs))
			}
			r := m.Runs[0]
			if r.Wall <= 0 || r.Bytes() < mr.InputBytes || r.CPU() <= 0 {
				t.Errorf("mix %s %s: wall %v, bytes %d (input %d), CPU %v", mr.Mix, m.Name, r.Wall, r.Bytes(), mr.InputBytes, r.CPU())
			}
			for _, p := range r.Procs {
				// 0: ended before its first sample (20 000 packets take
				// milliseconds); a sample right after exec can show as
				// little as a few pages, so the lower bound only catches
				// a unit error (KiB taken for bytes).
				if p.MaxRSS != 0 && p.MaxRSS < 4<<10 || p.MaxRSS > 1<<30 {
					t.Errorf("mix %s %s: %s peak RSS %d", mr.Mix, m.Name, p.Name, p.MaxRSS)
				}
			}
		}
		if b := mr.method(MethodFloor).Runs[0].Bytes(); b != mr.InputBytes {
			t.Errorf("mix %s: the copy floor wrote %d bytes, want the input's %d", mr.Mix, b, mr.InputBytes)
		}
		if b := mr.method(MethodRsync).Runs[0].Bytes(); b != 2*mr.InputBytes {
			t.Errorf("mix %s: tcpdump + rsync wrote %d bytes, want twice the input's %d", mr.Mix, b, mr.InputBytes)
		}
	}
	var out bytes.Buffer
	if err := WritePipeline(&out, cfg, res, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Pipeline goals (issue 4) on every mix: ") {
		t.Errorf("no goal line:\n%s", out.String())
	}
}
