package console

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// TestFederatedFlow: one flow's detail over two servers (a on the
// first, b on the second) and a third stopped equals the local
// detail of one root keeping both agents: the same records in the same
// order (each with its server), the same agents, the same correlation
// (b keeps half the conversations: its losses against a) and links;
// the third server down in servers; a bad request refused (400).
func TestFederatedFlow(t *testing.T) {
	fx := newFedFixture(t)
	var fl struct {
		Flows []flowquery.JSON `json:"flows"`
	}
	if code, body := getJSON(t, fx.local, "/api/flows?agent=b&limit=1", &fl); code != http.StatusOK || len(fl.Flows) == 0 {
		t.Fatalf("local flows of b: %d %s", code, body)
	}
	for _, q := range []string{"community_id=" + url.QueryEscape(fl.Flows[0].CommunityID), "agent=a&community_id=" + url.QueryEscape(fl.Flows[0].CommunityID)} {
		var local FlowDetail
		if code, body := getJSON(t, fx.local, "/api/flow?"+q, &local); code != http.StatusOK {
			t.Fatalf("local flow: %d %s", code, body)
		}
		var fed fedFlowDetail
		if code, body := fx.get(t, "/api/flow?"+q, &fed); code != http.StatusOK {
			t.Fatalf("federated flow: %d %s", code, body)
		}
		fx.checkServers(t, "flow", fed.Servers)
		for i, j := range fed.Seen {
			want := fx.addrs[0]
			if j.Agent == "b" {
				want = fx.addrs[1]
			}
			if j.Server != want {
				t.Errorf("%s: record %d of %s from %q, want %s", q, i, j.Agent, j.Server, want)
			}
			fed.Seen[i].Server = ""
		}
		if len(local.Agents) == 2 && (local.Correlation == nil || local.Correlation.Pairs[0].FromNotTo == 0 && local.Correlation.Pairs[0].Matched == 0) {
			t.Fatalf("%s: local correlation %+v: the fixture does not test one", q, local.Correlation)
		}
		if !reflect.DeepEqual(fed.Seen, local.Seen) || !reflect.DeepEqual(fed.Agents, local.Agents) ||
			!reflect.DeepEqual(fed.Correlation, local.Correlation) || fed.CorrelateError != local.CorrelateError ||
			fed.Packets != local.Packets || fed.Download != local.Download || fed.Coverage["flows"] != local.Coverage["flows"] {
			t.Errorf("%s: federated %+v (correlation %+v)\nwant the local %+v (correlation %+v)", q, fed.FlowDetail, fed.Correlation, local, local.Correlation)
		}
	}
	for _, q := range []string{"", "community_id=1:x", "community_id=a&community_id=b", "community_id=1:x&filter=tcp", "agent=../x&community_id=1:x"} {
		if code, body := fx.get(t, "/api/flow?"+q, nil); code != http.StatusBadRequest {
			t.Errorf("GET /api/flow?%s: %d %s, want 400", q, code, body)
		}
	}
}

// TestFederatedMarkers: the timeline's markers over two servers and a
// third stopped equal the local markers of one root keeping both
// agents with the first server's status: each agent's stops from its
// server's root, the first's connect from its status, each with its
// server; the third down in servers; a bad range refused (400).
func TestFederatedMarkers(t *testing.T) {
	fx := newFedFixture(t)
	since, until := time.Unix(0, flowtest.Base).Add(-time.Minute).UTC(), time.Now().Add(time.Minute).UTC()
	q := url.Values{"since": {since.Format(time.RFC3339Nano)}, "until": {until.Format(time.RFC3339Nano)}, "step": {"1h"}}.Encode()
	var local Markers
	if code, body := getJSON(t, fx.local, "/api/markers?"+q, &local); code != http.StatusOK {
		t.Fatalf("local markers: %d %s", code, body)
	}
	var fed fedMarkers
	if code, body := fx.get(t, "/api/markers?"+q, &fed); code != http.StatusOK {
		t.Fatalf("federated markers: %d %s", code, body)
	}
	fx.checkServers(t, "markers", fed.Servers)
	kinds := map[string]int{}
	for i, m := range fed.Markers.Markers {
		want := fx.addrs[0]
		if m.Agent == "b" {
			want = fx.addrs[1]
		}
		if m.Server != want {
			t.Errorf("marker %d %+v from %q, want %s", i, m, m.Server, want)
		}
		fed.Markers.Markers[i].Server = ""
		kinds[m.Agent+" "+m.Kind]++
	}
	if kinds["a stop"] == 0 || kinds["b stop"] == 0 || kinds["a connect"] != 1 {
		t.Errorf("markers %+v: want a stop of each agent and a's connect", kinds)
	}
	if !reflect.DeepEqual(fed.Markers, local) {
		t.Errorf("federated markers %+v\nwant the local %+v", fed.Markers, local)
	}
	if code, body := fx.get(t, "/api/markers?step=1ns", nil); code != http.StatusBadRequest {
		t.Errorf("step=1ns: %d %s, want 400", code, body)
	}
}
