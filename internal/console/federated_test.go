package console

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// fedFixture is two servers' query listeners on loopback over roots of
// their own (agent a on the first, with a status; b on the second,
// without) and the address of a third one stopped.
type fedFixture struct {
	roots   [2]string
	addrs   [3]string // the third stopped
	console *Handler
	// local is one root of both servers' agents, as one server would
	// keep them, the status of the first: the local console's answers
	// to compare.
	local *Handler
}

// serveRoot runs a query listener over dir on loopback until t ends
// (or stop is called) and returns its address.
func serveRoot(t *testing.T, dir string, status func() any) (string, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := queryhttp.New(queryhttp.Config{Listen: "127.0.0.1:0", Dir: dir, Status: status, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			if err := <-done; err != nil {
				t.Errorf("query listener: %v", err)
			}
		}
	}
	t.Cleanup(stop)
	return srv.Addr(), stop
}

func newFedFixture(t *testing.T) *fedFixture {
	t.Helper()
	fx := &fedFixture{}
	ps := flowtest.GenPackets(flowtest.GenConvs(5, 12))
	agents := []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 60}, {Name: "b", Iface: "b:eth1", PerFile: 40, Keep: func(c int) bool { return c%2 == 0 }}}
	now := time.Now().UTC()
	st := metrics.Status{Time: now, Agents: []metrics.AgentStatus{{Name: "a", Host: "host-a", Connected: true, Since: now.Add(-time.Minute)}}}
	statuses := []func() any{func() any { return st }, nil}
	for i := range fx.roots {
		fx.roots[i] = t.TempDir()
		flowtest.WriteRoot(t, fx.roots[i], ps, agents[i:i+1], &flow.Config{})
		fx.addrs[i], _ = serveRoot(t, fx.roots[i], statuses[i])
	}
	both := t.TempDir()
	flowtest.WriteRoot(t, both, ps, agents, &flow.Config{})
	var err error
	if fx.local, err = New(Config{Dir: both, Status: statuses[0], Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	var stop func()
	fx.addrs[2], stop = serveRoot(t, t.TempDir(), nil)
	stop()
	var ccs []queryhttp.ClientConfig
	for _, a := range fx.addrs {
		ccs = append(ccs, queryhttp.ClientConfig{Addr: a})
	}
	var src Source
	src, err = NewFederated(FederatedConfig{Servers: ccs, Timeout: 5 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if fx.console, err = New(Config{Source: src, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}); err != nil {
		t.Fatal(err)
	}
	return fx
}

// get asks the console's API (no front door: no token, every client
// admitted) and decodes its JSON into out.
func (fx *fedFixture) get(t *testing.T, path string, out any) (int, []byte) {
	t.Helper()
	return getJSON(t, fx.console, path, out)
}

// getJSON asks h's API (no front door) and decodes its JSON into out.
func getJSON(t *testing.T, h *Handler, path string, out any) (int, []byte) {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	if out != nil && strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(w.Body.Bytes(), out); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, w.Body.Bytes())
		}
	}
	return w.Code, w.Body.Bytes()
}

// checkServers checks that servers are the fixture's, the third down
// (unreachable), the others ok.
func (fx *fedFixture) checkServers(t *testing.T, what string, servers []Server) {
	t.Helper()
	if len(servers) != 3 {
		t.Fatalf("%s: servers %+v, want 3", what, servers)
	}
	for i, s := range servers {
		want := federate.OutcomeOK
		if i == 2 {
			want = federate.OutcomeUnreachable
		}
		if s.Server != fx.addrs[i] || s.Outcome != want || (i == 2) != (s.Reason != "") {
			t.Errorf("%s: server %d %+v, want %s %s", what, i, s, fx.addrs[i], want)
		}
	}
}

// TestFederated: a federated console over two servers and a third
// stopped answers every API from the two, each answer naming the third
// down: the agents with their servers, the flows of both (as
// flowquery.Run on their roots), the packets and one packet, the
// download (both servers' packets, the down one said in its comment),
// the timeline (each root's own, marked with its server).
func TestFederated(t *testing.T) {
	fx := newFedFixture(t)

	var ag Agents
	if code, body := fx.get(t, "/api/agents", &ag); code != http.StatusOK {
		t.Fatalf("agents: %d %s", code, body)
	}
	fx.checkServers(t, "agents", ag.Servers)
	if len(ag.Agents) != 2 || ag.Agents[0].Name != "a" || ag.Agents[0].Server != fx.addrs[0] || string(ag.Agents[0].Status) == "null" ||
		ag.Agents[1].Name != "b" || ag.Agents[1].Server != fx.addrs[1] || string(ag.Agents[1].Status) != "null" ||
		ag.Agents[0].Coverage == nil || ag.Agents[1].Coverage == nil || !ag.HasStatus {
		t.Fatalf("agents %+v", ag)
	}

	var fl struct {
		Flows      []flowquery.JSON `json:"flows"`
		TopTalkers []any            `json:"top_talkers"`
		Coverage   map[string]any   `json:"coverage"`
		Servers    []Server         `json:"servers"`
	}
	if code, body := fx.get(t, "/api/flows", &fl); code != http.StatusOK {
		t.Fatalf("flows: %d %s", code, body)
	}
	fx.checkServers(t, "flows", fl.Servers)
	want := 0
	for i, root := range fx.roots {
		flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: root})
		if err != nil {
			t.Fatal(err)
		}
		want += len(flows)
		n := 0
		for _, f := range fl.Flows {
			if f.Server == fx.addrs[i] {
				n++
			}
		}
		if n != len(flows) || n == 0 {
			t.Errorf("flows of server %d: %d, want %d", i, n, len(flows))
		}
	}
	var prev time.Time
	for i, f := range fl.Flows {
		first, err := time.Parse(time.RFC3339Nano, f.First)
		if err != nil || first.Before(prev) {
			t.Fatalf("flow %d first %q (%v): not in time order after %s", i, f.First, err, prev)
		}
		prev = first
	}
	if len(fl.Flows) != want || len(fl.TopTalkers) == 0 || fl.Coverage["flows"] != float64(want) {
		t.Errorf("flows: %d (top talkers %d, coverage %v), want %d", len(fl.Flows), len(fl.TopTalkers), fl.Coverage, want)
	}

	var pk struct {
		Lines   []string     `json:"lines"`
		Result  query.Result `json:"result"`
		Servers []Server     `json:"servers"`
	}
	if code, body := fx.get(t, "/api/packets?count=30", &pk); code != http.StatusOK {
		t.Fatalf("packets: %d %s", code, body)
	}
	fx.checkServers(t, "packets", pk.Servers)
	if len(pk.Lines) != 30 || pk.Result.Stopped != "count" || len(pk.Result.Coverage) != 2 || pk.Result.Coverage[0].Agent != "a on "+fx.addrs[0] {
		t.Errorf("packets: %d lines, result %+v", len(pk.Lines), pk.Result)
	}
	var one struct {
		Line    string   `json:"line"`
		Hex     string   `json:"hex"`
		Servers []Server `json:"servers"`
	}
	if code, body := fx.get(t, "/api/packet?index=7", &one); code != http.StatusOK || one.Line != pk.Lines[7] || one.Hex == "" {
		t.Errorf("packet 7: %d %s, want the line %q", code, body, pk.Lines[7])
	}
	fx.checkServers(t, "packet", one.Servers)

	code, dl := fx.get(t, "/api/download", nil)
	if code != http.StatusOK {
		t.Fatalf("download: %d %s", code, dl)
	}
	var total int64
	for _, root := range fx.roots {
		res, err := query.Run(context.Background(), query.Config{Dir: root}, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		total += res.Packets
	}
	r, err := pcapfile.NewReader(bytes.NewReader(dl), nil)
	if err != nil {
		t.Fatalf("download: %v", err)
	}
	var n, last int64
	var p pcapfile.Packet
	for r.ReadInto(&p) == nil {
		if p.Timestamp < last {
			t.Fatalf("download: packet %d before the one ahead of it", n)
		}
		last = p.Timestamp
		n++
	}
	if c := strings.Join(r.SectionComments(), "\n"); n != total || !strings.Contains(c, "partial: server "+fx.addrs[2]+": unreachable") {
		t.Errorf("download: %d packets, want %d; comment %q", n, total, c)
	}

	since, until := time.Unix(0, flowtest.Base).UTC(), time.Unix(0, flowtest.Base).UTC().Add(20*time.Second)
	v := url.Values{"since": {since.Format(time.RFC3339Nano)}, "until": {until.Format(time.RFC3339Nano)}, "step": {"1s"}}
	var tl struct {
		timeline.Timeline
		Servers []Server `json:"servers"`
	}
	if code, body := fx.get(t, "/api/timeline?"+v.Encode(), &tl); code != http.StatusOK {
		t.Fatalf("timeline: %d %s", code, body)
	}
	fx.checkServers(t, "timeline", tl.Servers)
	if len(tl.Agents) != 2 || tl.Points != 20 {
		t.Fatalf("timeline: %d agents, %d points", len(tl.Agents), tl.Points)
	}
	for i, root := range fx.roots {
		own, err := timeline.BuildTimeline(context.Background(), root, nil, since, until, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		s := own.Agents[0]
		s.Server = fx.addrs[i]
		if !reflect.DeepEqual(tl.Agents[i], s) {
			t.Errorf("timeline of server %d: %+v, want its own %+v", i, tl.Agents[i], s)
		}
	}
}

// TestFederatedRefused: a bad selection is refused (400) before any
// server is asked; with every server down, the answer is 502 naming
// them, never a blank page.
func TestFederatedRefused(t *testing.T) {
	fx := newFedFixture(t)
	for _, path := range []string{"/api/flows?since=yesterday-ish", "/api/packets?agent=../etc", "/api/timeline?step=1ns", "/api/download?count=x"} {
		if code, body := fx.get(t, path, nil); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s, want 400", path, code, body)
		}
	}
	// A filter every server refuses: 400 with a server's reason.
	for _, path := range []string{"/api/flows?filter=" + url.QueryEscape("tcp port ((("), "/api/packets?filter=" + url.QueryEscape("tcp port (((")} {
		var out struct {
			Error string `json:"error"`
		}
		if code, body := fx.get(t, path, &out); code != http.StatusBadRequest || !strings.Contains(out.Error, "refused the selection") {
			t.Errorf("GET %s: %d %s, want 400 with a server's reason", path, code, body)
		}
	}
	down, err := NewFederated(FederatedConfig{Servers: []queryhttp.ClientConfig{{Addr: fx.addrs[2]}}, Timeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	fx.console, _ = New(Config{Source: down, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, path := range []string{"/api/agents", "/api/flows", "/api/packets", "/api/timeline", "/api/download", "/api/markers",
		"/api/flow?community_id=" + url.QueryEscape("1:AAAAAAAAAAAAAAAAAAAAAAAAAAA=")} {
		var out struct {
			Error   string   `json:"error"`
			Servers []Server `json:"servers"`
		}
		code, body := fx.get(t, path, &out)
		named := len(out.Servers) == 1 && out.Servers[0].Outcome == federate.OutcomeUnreachable
		if path == "/api/download" {
			named = true // the download's error names the servers in its text only
		}
		if code != http.StatusBadGateway || !strings.Contains(out.Error, fx.addrs[2]) || !named {
			t.Errorf("GET %s with every server down: %d %s, want 502 naming it", path, code, body)
		}
	}
}
