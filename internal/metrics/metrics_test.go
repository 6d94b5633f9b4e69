package metrics

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/testutil"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/kafkaio"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// pipeline is a real collector (Core and TCP Server on loopback) and a
// real agent that replayed a generated file through it, both with
// their metrics.
type pipeline struct {
	coll    *Collector
	agent   *Agent
	status  *StatusPage
	sum     agent.Summary
	packets int
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func runPipeline(t *testing.T, packets int) *pipeline {
	t.Helper()
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pcap")
	if err := gen.WriteFile(in, gen.FileConfig{Count: uint64(packets), Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	p := &pipeline{coll: NewCollector(0), agent: NewAgent(), packets: packets}
	core, err := collector.NewCore(collector.Config{Insecure: true, Logger: quiet, BatchWriteLatency: p.coll.BatchWrite,
		Store: store.Config{Dir: filepath.Join(dir, "out"), Fsync: store.FsyncPerBatch, SyncLatency: p.coll.Sync}})
	if err != nil {
		t.Fatal(err)
	}
	p.coll.Watch(core, nil)
	p.status = NewStatusPage(core, nil)
	p.status.Status() // first sample
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- collector.NewServer(core).Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		<-served
		core.Close()
	})
	a, err := agent.New(agent.Config{Collectors: []string{ln.Addr().String()}, Name: "web1", ReadFile: in, Insecure: true, Version: "7.7.7 (test)",
		BatchBytes: 64 << 10, AckLatency: p.agent.AckLatency, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	p.agent.Watch(a)
	if p.sum, err = a.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPipelineMetrics: after a replay, the agent's and the collector's
// metrics equal what went through, and the status page says the same.
func TestPipelineMetrics(t *testing.T) {
	p := runPipeline(t, 5000)
	n := float64(p.packets)
	af := metricstest.Gather(t, p.agent.Registry)
	af.Expect(t, "agent", []metricstest.Want{
		{Name: "pcapsync_agent_captured_packets_total", Labels: []string{"interface=in.pcap"}, Value: n},
		{Name: "pcapsync_agent_sent_packets_total", Value: n},
		{Name: "pcapsync_agent_acknowledged_packets_total", Value: n},
		{Name: "pcapsync_agent_dropped_packets_total", Labels: []string{"reason=queue_full"}, Value: 0},
		{Name: "pcapsync_agent_dropped_packets_total", Labels: []string{"reason=rate_limit"}, Value: 0},
		{Name: "pcapsync_agent_unacknowledged_batches", Value: 0},
		{Name: "pcapsync_agent_unacknowledged_bytes", Value: 0},
		{Name: "pcapsync_agent_unacknowledged_packets", Value: 0},
		{Name: "pcapsync_agent_sealed_packets_total", Value: n},
		{Name: "pcapsync_agent_reconnects_total", Value: 0},
		{Name: "pcapsync_agent_failovers_total", Value: 0},
		{Name: "pcapsync_agent_resent_batches_total", Value: 0},
		{Name: "pcapsync_agent_compression_ratio", Value: 1},
		{Name: "pcapsync_agent_connected", Value: 0},
	})
	batches := af.Value(t, "pcapsync_agent_sent_batches_total")
	if batches < 2 || af.Value(t, "pcapsync_agent_acknowledged_batches_total") != batches ||
		af.Value(t, "pcapsync_agent_ack_latency_seconds") != batches {
		t.Errorf("agent: %v batches sent, %v acknowledged, %v ack latencies observed: want all equal",
			batches, af.Value(t, "pcapsync_agent_acknowledged_batches_total"), af.Value(t, "pcapsync_agent_ack_latency_seconds"))
	}
	if got, want := af.Value(t, "pcapsync_agent_compression_input_bytes_total"), float64(p.sum.RawBytes); got != want || got == 0 {
		t.Errorf("compression input bytes %v, want %v (summary)", got, want)
	}

	cf := metricstest.Gather(t, p.coll.Registry)
	cf.Expect(t, "collector", []metricstest.Want{
		{Name: "pcapsync_collector_packets_written_total", Labels: []string{"agent=web1"}, Value: n},
		{Name: "pcapsync_collector_batches_written_total", Labels: []string{"agent=web1"}, Value: batches},
		{Name: "pcapsync_collector_batch_write_seconds", Value: batches},
		{Name: "pcapsync_collector_duplicate_batches_total", Labels: []string{"agent=web1"}, Value: 0},
		{Name: "pcapsync_collector_lost_batches_total", Labels: []string{"agent=web1"}, Value: 0},
		{Name: "pcapsync_collector_agent_captured_packets_total", Labels: []string{"agent=web1"}, Value: n}, // the goodbye's stats
		{Name: "pcapsync_collector_sessions_total", Value: 1},
		{Name: "pcapsync_collector_decode_errors_total", Labels: []string{"kind=protocol"}, Value: 0},
	})
	// The agent's bytes read are the collector's bytes written.
	if got, want := cf.Value(t, "pcapsync_collector_written_bytes_total", "agent=web1"),
		af.Value(t, "pcapsync_agent_captured_bytes_total", "interface=in.pcap"); got != want || got == 0 {
		t.Errorf("collector wrote %v bytes, agent read %v", got, want)
	}
	// One fsync per acknowledgement (--fsync batch), and the close's.
	if got := cf.Value(t, "pcapsync_collector_fsync_seconds"); got < 2 {
		t.Errorf("%v fsyncs observed, want one per commit", got)
	}

	// The agent is gone once the collector ended its session.
	testutil.EventuallyTrue(t, 5*time.Second, "the collector to show the agent gone after its goodbye", func() bool {
		return !p.status.Status().Agents[0].Connected
	})
	srv := httptest.NewServer(Handler(p.coll.Registry, Options{Status: p.status}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	if len(st.Agents) != 1 {
		t.Fatalf("status lists %d agents, want 1: %+v", len(st.Agents), st)
	}
	a := st.Agents[0]
	if a.Name != "web1" || a.Packets != uint64(p.packets) || a.Transport != "tcp" || a.LastSeq != uint64(batches) ||
		a.AckedSeq != a.LastSeq || a.Lag != 0 || a.Connected || a.Address == "" || a.PacketsPerSecond <= 0 {
		t.Errorf("status row %+v: want web1, %d packets, tcp, last seq = acked seq = %v, disconnected, a rate", a, p.packets, batches)
	}
	if a.Version != "7.7.7 (test)" { // the agent's Info frame
		t.Errorf("status version %q, want the agent's 7.7.7 (test)", a.Version)
	}
	// The agent's interfaces (its hello's) with its last counters, and
	// when its session ended.
	if len(a.Interfaces) != 1 || a.Interfaces[0].Name != "in.pcap" || !a.Interfaces[0].Reported ||
		a.Interfaces[0].Captured != uint64(p.packets) || a.Interfaces[0].LinkType != 1 || a.Interfaces[0].SnapLen == 0 {
		t.Errorf("status interfaces %+v: want in.pcap, Ethernet, its %d packets captured", a.Interfaces, p.packets)
	}
	if a.Disconnected.IsZero() || a.Disconnected.Before(a.Since) || a.Disconnected.After(st.Time) {
		t.Errorf("status disconnected_at %v: want when the session (from %v) ended, before %v", a.Disconnected, a.Since, st.Time)
	}
	var out strings.Builder
	if err := WriteTable(&out, st); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^web1 +127\.0\.0\.1:\d+ +tcp +down .* 7\.7\.7 \(test\)$`).MatchString(out.String()) {
		t.Errorf("table:\n%s", out.String())
	}
	if resp, err := http.Get(srv.URL + "/debug/pprof/"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("pprof served without Options.Pprof: %v %v", resp.Status, err)
	}
}

// exported returns every pcapsync_ metric family the real registries
// export after a replay.
func exported(t *testing.T) map[string]bool {
	p := runPipeline(t, 500)
	feeds := NewCollector(0) // the live views' counters, registered when --tap or --redis is on
	feeds.WatchTap(&tap.Counters{})
	feeds.WatchRedis(&redisfeed.Counters{})
	feeds.WatchQuery(&queryhttp.Counters{})
	WatchListener(feeds.Registry, "query", "127.0.0.1:1", &frontdoor.Counters{})
	kafka := NewCollector(0) // an ingest collector's and a writer's
	kafka.WatchProducer(&kafkarec.ProducerCounters{})
	kafka.WatchWriter(&kafkaio.WriterCounters{}, consumerStub{{Partition: 0, Committed: 1, End: 2, Lag: 1}})
	WatchCertificates(kafka.Registry, []pki.Certificate{{File: "ca.pem", Role: pki.RoleCA, Subject: "site CA"}})
	retained := retainingCollector(t) // a size rule's limit and watermarks, once retention checked it
	names := map[string]bool{}
	for _, reg := range []*prometheus.Registry{p.agent.Registry, p.coll.Registry, feeds.Registry, kafka.Registry, retained.Registry} {
		for name := range metricstest.Gather(t, reg) {
			if strings.HasPrefix(name, "pcapsync_") {
				names[name] = true
			}
		}
	}
	return names
}

// retainingCollector returns the metrics of a running collector core
// with --retain-size, once its retention has checked the limit.
func retainingCollector(t *testing.T) *Collector {
	t.Helper()
	core, err := collector.NewCore(collector.Config{Insecure: true, Logger: quiet,
		Store: store.Config{Dir: t.TempDir(), Retain: store.RetainConfig{MaxBytes: 1 << 40}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { core.Run(ctx); close(ran) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		core.Close()
	})
	m := NewCollector(0)
	m.Watch(core, nil)
	testutil.EventuallyTrue(t, 10*time.Second, "retention's size limit exported", func() bool {
		_, err := metricstest.Gather(t, m.Registry).Lookup("pcapsync_collector_retention_limit_bytes", "rule=size")
		return err == nil
	})
	return m
}

var metricName = regexp.MustCompile(`\bpcapsync_[a-z0-9_]+`)

// used strips the histogram suffixes from every pcapsync_ name in s.
func used(s string) map[string]bool {
	out := map[string]bool{}
	for _, n := range metricName.FindAllString(s, -1) {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(n, suf); ok && strings.HasSuffix(b, "_seconds") {
				n = b
			}
		}
		out[n] = true
	}
	return out
}

// TestDocumented: docs/metrics.md lists every exported metric, and
// nothing else.
func TestDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	got, documented := exported(t), used(string(doc))
	for n := range got {
		if !documented[n] {
			t.Errorf("%s is exported but not in docs/metrics.md", n)
		}
	}
	for n := range documented {
		if !got[n] {
			t.Errorf("docs/metrics.md names %s, which is not exported", n)
		}
	}
}

// TestDashboard: every query of the Grafana dashboard refers to metrics
// the binaries export.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "grafana", "pcapsync.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	got := exported(t)
	queries := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			names := used(tg.Expr)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no pcapsync metric", p.Title, tg.Expr)
			}
			for n := range names {
				if !got[n] {
					t.Errorf("panel %q: %s is not exported (query %q)", p.Title, n, tg.Expr)
				}
			}
			queries++
		}
	}
	for _, v := range dash.Templating.List {
		for n := range used(v.Definition) {
			if !got[n] {
				t.Errorf("variable %q: %s is not exported", v.Name, n)
			}
		}
	}
	if queries < 10 {
		t.Errorf("dashboard has %d queries; expected its panels", queries)
	}
}

// TestMaxAgents: past the cap, agents are summed under OtherAgents.
func TestMaxAgents(t *testing.T) {
	m := NewCollector(2)
	core, err := collector.NewCore(collector.Config{Store: store.Config{Dir: t.TempDir()}, Insecure: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	m.Watch(core, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- collector.NewServer(core).Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
		core.Close()
	}()
	for i, name := range []string{"c", "a", "d", "b"} {
		// A connected agent: a hello, answered by a welcome.
		h := wire.Hello{Name: name, Instance: [16]byte{byte(i + 1)},
			Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}}
		conn, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(wire.AppendHello(nil, &h)); err != nil {
			t.Fatal(err)
		}
		if fh, _, err := wire.NewFrameReader(conn, wire.Limits{}).Next(); err != nil || fh.Type != wire.TypeWelcome {
			t.Fatalf("agent %s: %s, %v; want a welcome", name, fh.Type, err)
		}
	}
	fams := metricstest.Gather(t, m.Registry)
	var labels []string
	for _, s := range fams["pcapsync_collector_agent_connected"].GetMetric() {
		labels = append(labels, s.GetLabel()[0].GetValue())
	}
	slices.Sort(labels)
	if want := []string{"a", "b", OtherAgents}; !slices.Equal(labels, want) {
		t.Errorf("agent label values %v, want %v", labels, want)
	}
	fams.Expect(t, "capped", []metricstest.Want{
		{Name: "pcapsync_collector_agent_connected", Labels: []string{"agent=" + OtherAgents}, Value: 2},
		{Name: "pcapsync_collector_agents_connected", Value: 4},
	})
	if _, err := fams.Lookup("pcapsync_collector_agent_lag_batches", "agent="+OtherAgents); err == nil {
		t.Error("a lag gauge for the other agents: it does not add up")
	}
}

func TestWatchCertificates(t *testing.T) {
	reg := prometheus.NewRegistry()
	at := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	WatchCertificates(reg, []pki.Certificate{
		{File: "/etc/pcapsync/agent.pem", Role: pki.RoleCert, Subject: "web1", NotAfter: at},
		{File: "/etc/pcapsync/ca.pem", Role: pki.RoleCA, Subject: "site CA", NotAfter: at.Add(time.Hour)},
	})
	f := metricstest.Gather(t, reg)
	name := "pcapsync_tls_certificate_expiry_timestamp_seconds"
	if got := f.Value(t, name, "file=/etc/pcapsync/agent.pem", "role=cert", "subject=web1"); got != float64(at.Unix()) {
		t.Errorf("agent certificate: %v, want %v", got, at.Unix())
	}
	if got := f.Value(t, name, "role=ca", "subject=site CA"); got != float64(at.Unix()+3600) {
		t.Errorf("CA: %v, want %v", got, at.Unix()+3600)
	}
	empty := prometheus.NewRegistry()
	WatchCertificates(empty, nil)
	if _, ok := metricstest.Gather(t, empty)[name]; ok {
		t.Error("no certificates: the metric is exported all the same")
	}
}

// TestAlertRules: every metric the alert rules of deploy/prometheus
// name is exported, and promtool finds the rules valid and passes
// their unit tests (pcapsync.rules.test.yml).
func TestAlertRules(t *testing.T) {
	dir := filepath.Join("..", "..", "deploy", "prometheus")
	b, err := os.ReadFile(filepath.Join(dir, "pcapsync.rules.yml"))
	if err != nil {
		t.Fatal(err)
	}
	got := exported(t)
	names := used(string(b))
	if len(names) < 15 {
		t.Errorf("the rules name %d pcapsync metrics, want more", len(names))
	}
	for n := range names {
		if !got[n] {
			t.Errorf("the alert rules use %s, which is not exported", n)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("PCAPSYNC_E2E_REQUIRE") == "1" {
			t.Fatal("promtool not found (Debian package prometheus; scripts/deps.sh installs it)")
		}
		t.Skip("promtool not found")
	}
	for _, args := range [][]string{{"check", "rules", "pcapsync.rules.yml"}, {"test", "rules", "pcapsync.rules.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
