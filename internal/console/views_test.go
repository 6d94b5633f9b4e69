package console

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// lossRoot writes a root where agents a and b saw the same
// conversations but b missed the third packet of conversation 0, and
// returns it with conversation 0's Community ID and its packets at a.
func lossRoot(t *testing.T) (dir, cid string, packets int) {
	t.Helper()
	dir = t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(3, 6))
	var atB []flowtest.Packet
	seen := 0
	for _, p := range ps {
		if p.C == 0 {
			packets++
			if seen++; seen == 3 {
				continue
			}
		}
		atB = append(atB, p)
	}
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 30}}, &flow.Config{})
	flowtest.WriteRoot(t, dir, atB, []flowtest.Agent{{Name: "b", Iface: "b:eth1", PerFile: 25}}, &flow.Config{})
	flows, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: dir, Agents: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range flows { // conversation 0's: its first packet is the root's first
		if f.First == flowtest.Base {
			return dir, f.CommunityID, packets
		}
	}
	t.Fatal("no flow of conversation 0")
	return
}

// TestFlowDetail: GET /api/flow gives every agent's record of one
// Community ID (flows --same) and correlate's counts between them: the
// packet b missed is seen at a, never at b; a flow only a saw has no
// correlation; its links select its packets.
func TestFlowDetail(t *testing.T) {
	dir, cid, n := lossRoot(t)
	h, err := New(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, h)
	resp, body := ts.get(t, "/api/flow?community_id="+url.QueryEscape(cid))
	var d FlowDetail
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &d) != nil {
		t.Fatalf("GET /api/flow: %d %.300s", resp.StatusCode, body)
	}
	if !slices.Equal(d.Agents, []string{"a", "b"}) || len(d.Seen) != 2 || d.Seen[0].Agent != "a" || d.Seen[1].Agent != "b" {
		t.Errorf("seen %+v by %q; want one record at a and one at b", d.Seen, d.Agents)
	}
	if got := d.Seen[0].SrcPackets + d.Seen[0].DstPackets; got != uint64(n) {
		t.Errorf("a's record counts %d packets, the conversation has %d", got, n)
	}
	if d.Correlation == nil || len(d.Correlation.Pairs) != 1 {
		t.Fatalf("correlation %+v (%s); want the pair a -> b", d.Correlation, d.CorrelateError)
	}
	p := d.Correlation.Pairs[0]
	if p.From != "a" || p.To != "b" || p.AtFrom != int64(n) || p.AtTo != int64(n-1) || p.Matched != int64(n-1) || p.FromNotTo != 1 || p.ToNotFrom != 0 {
		t.Errorf("pair %+v; want a -> b: %d at a, %d at b, 1 seen at a never at b", p, n, n-1)
	}
	if want := "community_id=" + url.QueryEscape(cid); d.Packets != "/packets?"+want || d.Download != "/api/download?"+want {
		t.Errorf("links %q %q", d.Packets, d.Download)
	}

	// A flow only a saw (conversation 0 is at both; b keeps all of the
	// others too, so remove nothing: ask for a alone).
	resp, body = ts.get(t, "/api/flow?agent=a&community_id="+url.QueryEscape(cid))
	d = FlowDetail{}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &d) != nil || !slices.Equal(d.Agents, []string{"a"}) || d.Correlation != nil {
		t.Errorf("a alone: %d %.300s; want a's record and no correlation", resp.StatusCode, body)
	}
	if !strings.Contains(d.Packets, "agent=a") {
		t.Errorf("a alone: packets link %q without the selection", d.Packets)
	}

	for _, q := range []string{"", "community_id=", "community_id=1:x", "community_id=" + url.QueryEscape(cid) + "&filter=tcp",
		"community_id=" + url.QueryEscape(cid) + "&count=1", "community_id=a&community_id=b", "community_id=" + url.QueryEscape(cid) + "&agent=../x",
		"community_id=" + strings.Repeat("x", 5000), "community_id=" + url.QueryEscape(cid) + "&bogus=1"} {
		resp, body := ts.get(t, "/api/flow?"+q)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error == "" {
			t.Errorf("%.80s: %d %.200s, want 400 with an error", q, resp.StatusCode, body)
		}
	}
}

// TestMarkers: GET /api/markers marks each agent's last packet before
// a gap longer than the step (its file closed) and the status's
// connects and disconnects in the range, none outside it.
func TestMarkers(t *testing.T) {
	dir := t.TempDir()
	ps := flowtest.GenPackets(flowtest.GenConvs(5, 4))
	later := slices.Clone(ps)
	for i := range later {
		later[i].TS += int64(time.Hour)
	}
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 20}}, &flow.Config{})
	flowtest.WriteRoot(t, dir, later, []flowtest.Agent{{Name: "a", Iface: "a:eth0", PerFile: 20, Names: time.Hour}}, &flow.Config{})
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "b", Iface: "b:eth0", PerFile: 1000}}, &flow.Config{})
	// c: a file and a second one (its name later) of a few packets
	// within the first's span: one stop, at the end of the first.
	shifted := slices.Clone(ps[:3])
	for i := range shifted {
		shifted[i].TS += int64(time.Millisecond)
	}
	flowtest.WriteRoot(t, dir, ps, []flowtest.Agent{{Name: "c", Iface: "c:eth0", PerFile: 1000}}, &flow.Config{})
	flowtest.WriteRoot(t, dir, shifted, []flowtest.Agent{{Name: "c", Iface: "c:eth0", PerFile: 1000, Names: time.Minute}}, &flow.Config{})
	last := func(agent string, until time.Time) time.Time {
		var at int64
		q, err := query.Prepare(context.Background(), query.Config{Dir: dir, Agents: []string{agent}, Until: until})
		if err != nil {
			t.Fatal(err)
		}
		q.Each(context.Background(), func(p *query.Packet) error { at = p.Timestamp; return nil })
		return time.Unix(0, at).UTC()
	}
	base := time.Unix(0, flowtest.Base).UTC()
	disc := base.Add(30 * time.Minute)
	status := metrics.Status{Agents: []metrics.AgentStatus{
		{Name: "a", Since: base.Add(-time.Hour), Disconnected: disc, Address: "192.0.2.1:4000"},
		{Name: "b", Connected: true, Since: base.Add(time.Minute), Address: "192.0.2.2:4000"},
	}}
	h, err := New(Config{Dir: dir, Status: func() any { return status }, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ts := newServer(t, h)
	get := func(q string) Markers {
		t.Helper()
		resp, body := ts.get(t, "/api/markers?"+q)
		var m Markers
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil {
			t.Fatalf("GET /api/markers?%s: %d %.300s", q, resp.StatusCode, body)
		}
		return m
	}
	rng := "since=" + base.Add(-time.Minute).Format(time.RFC3339) + "&until=" + base.Add(2*time.Hour).Format(time.RFC3339)
	m := get(rng + "&step=10s")
	type mk struct {
		agent, kind string
		at          time.Time
	}
	var got []mk
	for _, x := range m.Markers {
		got = append(got, mk{x.Agent, x.Kind, x.Time})
	}
	want := []mk{
		{"b", MarkStop, last("b", time.Time{})},
		{"c", MarkStop, last("c", time.Time{})},
		{"a", MarkStop, last("a", base.Add(time.Minute))}, // before the hour's gap
		{"a", MarkDisconnect, disc},
		{"b", MarkConnect, base.Add(time.Minute)},
		{"a", MarkStop, last("a", time.Time{})},
	}
	slices.SortStableFunc(want, func(x, y mk) int { return cmp.Or(x.at.Compare(y.at), strings.Compare(x.agent, y.agent)) })
	if !slices.Equal(got, want) || m.Unknown != 0 || m.Error != "" {
		t.Errorf("markers %+v (unknown %d, error %q);\nwant %+v", got, m.Unknown, m.Error, want)
	}
	if !strings.Contains(m.Markers[len(m.Markers)-1].Text, "nothing kept after it") {
		t.Errorf("the last stop says %q", m.Markers[len(m.Markers)-1].Text)
	}
	// A step longer than the gap: no stop at it; an agent selected.
	m = get(rng + "&step=2h&agent=a")
	if len(m.Markers) != 2 || m.Markers[0].Kind != MarkDisconnect || m.Markers[1].Kind != MarkStop {
		t.Errorf("step 2h, agent a: %+v; want the disconnect and the last stop", m.Markers)
	}
	// A range before everything: nothing.
	if m = get("since=2020-01-01T00:00:00Z&until=2020-01-02T00:00:00Z"); len(m.Markers) != 0 {
		t.Errorf("a range before the root: %+v", m.Markers)
	}
	for _, q := range []string{"step=0", "filter=tcp", "since=2026-01-02&until=2026-01-01", "agent=../x"} {
		if resp, _ := ts.get(t, "/api/markers?"+q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, resp.StatusCode)
		}
	}
}
