//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestMetrics runs a collector and two agents with --metrics, pushes
// known traffic and scrapes /metrics and /status: the counters must
// equal what the test sent, what was written and what was dropped.
//
//   - "replay1" replays a file of replayN packets: the collector's
//     counters for it must say replayN written, nothing lost.
//   - "lossy" captures live, with --queue-size 1M (the smallest) and
//     --max-rate 3000, and sends liveN packets at 4000/s while the
//     collector is not running yet: the rate limit drops some, the
//     full queue drops more (whole batches), the rest waits and is
//     delivered once the collector starts. Its metrics must add up
//     exactly: captured = sent by the generator = acknowledged +
//     dropped{queue_full} + dropped{rate_limit}, each reason above 0;
//     the collector wrote what was acknowledged, and reports the
//     agent's own drops and captures; the summary lines and the files
//     say the same.
func TestMetrics(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const (
		port    = 5555
		liveN   = 6000
		replayN = 2000
	)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	dir := t.TempDir()
	in := filepath.Join(t.TempDir(), "replay.pcap")
	writeGenFile(t, in, gen.FileConfig{Count: replayN, Mix: gen.MixIMIX, Stream: 2})
	addr := freeport.Addr(t)
	collMetrics := freeport.Addr(t)
	agentMetrics := freeport.Addr(t)
	scrape := newNetnsScraper(t, vn.A)

	lossy := startProc(t, ctx, "agent lossy", vn.A, "agent", "--collector", addr, "--name", "lossy",
		"--iface", "vA", "--queue-size", "1M", "--max-rate", "3000", "--stats-interval", "200ms",
		"--metrics", agentMetrics, "--pprof", "--filter", fmt.Sprintf("udp and dst port %d", port))
	lossy.waitReady(15 * time.Second) // capturing; no collector to reach yet
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(liveN), "--rate", "4000")
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("generator exited with %d", code)
	}
	if !strings.Contains(g.stdout.String(), fmt.Sprintf("sent %d datagrams", liveN)) {
		t.Fatalf("generator: %q", g.stdout.String())
	}
	// The agent serves its metrics while the collector is away.
	if m := scrape.metrics(agentMetrics); m.Value(t, "pcapsync_agent_connected") != 0 ||
		m.Value(t, "pcapsync_agent_reconnects_total") == 0 {
		t.Errorf("before the collector runs: connected %v, reconnects %v; want 0 and some",
			m.Value(t, "pcapsync_agent_connected"), m.Value(t, "pcapsync_agent_reconnects_total"))
	}
	if code := scrape.status(agentMetrics + "/debug/pprof/cmdline"); code != http.StatusOK {
		t.Errorf("agent with --pprof: /debug/pprof/cmdline answered %d", code)
	}

	coll := startCollector(t, ctx, vn.A, addr, dir, "--metrics", collMetrics)
	if code := scrape.status(collMetrics + "/debug/pprof/cmdline"); code != http.StatusNotFound {
		t.Errorf("collector without --pprof: /debug/pprof/cmdline answered %d, want 404", code)
	}
	replay := startProc(t, ctx, "agent replay1", vn.A, "agent", "--collector", addr, "--name", "replay1", "--read", in)
	finishReplay(t, replay, replayN, 30*time.Second)

	// The lossy agent reconnects (backoff up to 5s) and delivers its
	// queue; then its counters settle.
	var am metricstest.Families
	var captured, acked, queueDrops, rateDrops float64
	settled := func() bool {
		am = scrape.metrics(agentMetrics)
		captured = am.Value(t, "pcapsync_agent_captured_packets_total", "interface=vA")
		acked = am.Value(t, "pcapsync_agent_acknowledged_packets_total")
		queueDrops = am.Value(t, "pcapsync_agent_dropped_packets_total", "reason="+metrics.ReasonQueueFull)
		rateDrops = am.Value(t, "pcapsync_agent_dropped_packets_total", "reason="+metrics.ReasonRateLimit)
		return captured == liveN && acked+queueDrops+rateDrops == captured &&
			am.Value(t, "pcapsync_agent_unacknowledged_batches") == 0
	}
	testutil.Eventually(t, 20*time.Second, func() error {
		if settled() {
			return nil
		}
		return fmt.Errorf("agent lossy: captured %v, acknowledged %v, dropped queue_full %v rate_limit %v, unacknowledged batches %v; want %d captured = the rest",
			captured, acked, queueDrops, rateDrops, am.Value(t, "pcapsync_agent_unacknowledged_batches"), liveN)
	})
	if queueDrops == 0 || rateDrops == 0 || acked == 0 {
		t.Errorf("agent lossy: acknowledged %v, dropped queue_full %v, rate_limit %v: want each above 0 (the test forces both drops)",
			acked, queueDrops, rateDrops)
	}
	batches := am.Value(t, "pcapsync_agent_acknowledged_batches_total")
	am.Expect(t, "agent lossy", []metricstest.Want{
		{Name: "pcapsync_agent_kernel_dropped_packets_total", Labels: []string{"interface=vA"}, Value: 0},
		{Name: "pcapsync_agent_sent_packets_total", Value: acked},
		{Name: "pcapsync_agent_sent_batches_total", Value: batches},
		{Name: "pcapsync_agent_ack_latency_seconds", Value: batches},
		{Name: "pcapsync_agent_unacknowledged_bytes", Value: 0},
		{Name: "pcapsync_agent_unacknowledged_packets", Value: 0},
		{Name: "pcapsync_agent_connected", Value: 1},
	})

	// The collector's view: written what was acknowledged, and the
	// agent's own counters from its stats reports (every 200ms).
	var cm metricstest.Families
	collSettled := func() bool {
		cm = scrape.metrics(collMetrics)
		return cm.Value(t, "pcapsync_collector_agent_dropped_packets_total", "agent=lossy") == queueDrops+rateDrops &&
			cm.Value(t, "pcapsync_collector_packets_written_total", "agent=lossy") == acked
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if collSettled() {
			return nil
		}
		return fmt.Errorf("collector: lossy written %v (want %v), its reported drops %v (want %v)",
			cm.Value(t, "pcapsync_collector_packets_written_total", "agent=lossy"), acked,
			cm.Value(t, "pcapsync_collector_agent_dropped_packets_total", "agent=lossy"), queueDrops+rateDrops)
	})
	replayBatches := cm.Value(t, "pcapsync_collector_batches_written_total", "agent=replay1")
	cm.Expect(t, "collector", []metricstest.Want{
		{Name: "pcapsync_collector_packets_written_total", Labels: []string{"agent=replay1"}, Value: replayN},
		{Name: "pcapsync_collector_batches_written_total", Labels: []string{"agent=lossy"}, Value: batches},
		{Name: "pcapsync_collector_agent_captured_packets_total", Labels: []string{"agent=lossy"}, Value: liveN},
		{Name: "pcapsync_collector_agent_kernel_dropped_packets_total", Labels: []string{"agent=lossy"}, Value: 0},
		{Name: "pcapsync_collector_agent_captured_packets_total", Labels: []string{"agent=replay1"}, Value: replayN},
		{Name: "pcapsync_collector_lost_batches_total", Labels: []string{"agent=lossy"}, Value: 0},
		{Name: "pcapsync_collector_lost_batches_total", Labels: []string{"agent=replay1"}, Value: 0},
		{Name: "pcapsync_collector_duplicate_batches_total", Labels: []string{"agent=replay1"}, Value: 0},
		{Name: "pcapsync_collector_agent_connected", Labels: []string{"agent=lossy"}, Value: 1},
		{Name: "pcapsync_collector_agents_connected", Value: 1},
		{Name: "pcapsync_collector_sessions_total", Value: 2},
		{Name: "pcapsync_collector_batch_write_seconds", Value: batches + replayBatches},
		{Name: "pcapsync_collector_decode_errors_total", Labels: []string{"kind=protocol"}, Value: 0},
		{Name: "pcapsync_collector_file_errors_total", Value: 0},
		{Name: "pcapsync_collector_files_closed_total", Value: 1}, // replay1's, at its goodbye
	})
	if got := cm.Value(t, "pcapsync_collector_written_bytes_total", "agent=replay1"); got == 0 {
		t.Error("collector: no bytes written for replay1")
	}

	// /status, through the status command, as JSON and as a table.
	st := startProc(t, ctx, "status --json", vn.A, "status", "--collector-admin", collMetrics, "--json")
	if code := st.wait(10 * time.Second); code != 0 {
		t.Fatalf("pcapsync status --json exited with %d", code)
	}
	var status metrics.Status
	if err := json.Unmarshal([]byte(st.stdout.String()), &status); err != nil {
		t.Fatalf("decoding pcapsync status --json: %v\n%s", err, st.stdout.String())
	}
	rows := map[string]metrics.AgentStatus{}
	for _, a := range status.Agents {
		rows[a.Name] = a
	}
	if r := rows["lossy"]; !r.Connected || r.Packets != uint64(acked) || r.AgentDrops != uint64(queueDrops+rateDrops) ||
		r.KernelDrops != 0 || r.LostBatches != 0 || r.Transport != "tcp" || r.LastSeq != r.AckedSeq || r.Lag != 0 ||
		!strings.HasPrefix(r.Address, "127.0.0.1:") {
		t.Errorf("status row of lossy %+v: want connected over tcp from 127.0.0.1, %v packets, %v agent drops, lag 0", r, acked, queueDrops+rateDrops)
	}
	if r := rows["replay1"]; r.Connected || r.Packets != replayN || r.LastSeq == 0 || r.LastSeq != r.AckedSeq {
		t.Errorf("status row of replay1 %+v: want disconnected, %d packets, last seq = acked seq", r, replayN)
	}
	tab := startProc(t, ctx, "status", vn.A, "status", "--collector-admin", collMetrics)
	if code := tab.wait(10 * time.Second); code != 0 {
		t.Fatalf("pcapsync status exited with %d", code)
	}
	table := tab.stdout.String()
	t.Logf("pcapsync status:\n%s", table)
	for _, re := range []string{
		`(?m)^AGENT +ADDRESS +TRANSPORT +STATE +PKT/S +BYTES/S +PACKETS +KERNEL DROPS +AGENT DROPS +LOST BATCHES +LAST SEQ +LAG`,
		fmt.Sprintf(`(?m)^lossy +127\.0\.0\.1:\d+ +tcp +up \S+ +\d+ +\S+ +%d +0 +%d +0 +\d+ +0`, int(acked), int(queueDrops+rateDrops)),
		fmt.Sprintf(`(?m)^replay1 +127\.0\.0\.1:\d+ +tcp +down \S+ +\d+ +\S+ +%d +0 +0 +0 +\d+ +0`, replayN),
		`(?m)^2 agents, 1 connected`,
	} {
		if !regexp.MustCompile(re).MatchString(table) {
			t.Errorf("status table does not match %s", re)
		}
	}

	// The closing lines and the files say the same as the metrics.
	lossy.stop(20 * time.Second)
	s := lossy.summary()
	if float64(s.Read) != captured || float64(s.Acked) != acked || float64(s.Dropped) != queueDrops || float64(s.RateDrops) != rateDrops || s.Unacked != 0 {
		t.Errorf("agent lossy summary %+v: want read %v, acknowledged %v, dropped %v, rate-limited %v as its metrics said",
			s, captured, acked, queueDrops, rateDrops)
	}
	coll.stop(20 * time.Second)
	if cs := coll.collectorSummary(); float64(cs.Packets) != acked+replayN || cs.Duplicates != 0 {
		t.Errorf("collector summary %+v: want %v packets, no duplicates", cs, acked+replayN)
	}
	r := checkAgentDir(t, filepath.Join(dir, "lossy"))
	if dups := r.Packets - len(r.Counts); float64(r.Packets) != acked || dups != 0 {
		t.Errorf("lossy's files hold %d packets (%d duplicated), want the %v acknowledged", r.Packets, dups, acked)
	}
	checkAgentDir(t, filepath.Join(dir, "replay1")).expectExactlyOnce(t, "replay1", map[uint32]uint64{2: replayN})
	t.Logf("live %d: acknowledged %v, dropped queue_full %v, rate_limit %v; replay %d; %v + %v batches",
		liveN, acked, queueDrops, rateDrops, replayN, batches, replayBatches)
}

// netnsScraper makes HTTP requests from inside a network namespace:
// each connection's socket is made there (see inNetns).
type netnsScraper struct {
	t *testing.T
	c *http.Client
}

func newNetnsScraper(t *testing.T, ns string) *netnsScraper {
	return &netnsScraper{t: t, c: nsClient(ns)}
}

// get returns the status code and body of http://url.
func (s *netnsScraper) get(url string) (int, []byte) {
	s.t.Helper()
	resp, err := s.c.Get("http://" + url)
	if err != nil {
		s.t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, b
}

func (s *netnsScraper) status(url string) int {
	code, _ := s.get(url)
	return code
}

// metrics scrapes http://addr/metrics and parses it.
func (s *netnsScraper) metrics(addr string) metricstest.Families {
	s.t.Helper()
	code, b := s.get(addr + "/metrics")
	if code != http.StatusOK {
		s.t.Fatalf("GET %s/metrics: %d\n%s", addr, code, b)
	}
	fams, err := metricstest.Parse(strings.NewReader(string(b)))
	if err != nil {
		s.t.Fatalf("parsing %s/metrics: %v", addr, err)
	}
	return fams
}
