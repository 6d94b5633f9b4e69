package queryhttp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flowquery"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// flowsFixture writes a root with flow files (two agents).
func flowsFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	flowtest.WriteRoot(t, dir, flowtest.GenPackets(flowtest.GenConvs(3, 40)), []flowtest.Agent{
		{Name: "a1", Iface: "a1:eth0", PerFile: 90},
		{Name: "a2", Iface: "a2:eth1", PerFile: 70, Keep: func(c int) bool { return c%3 == 0 }},
	}, &flow.Config{SplitPackets: 10})
	return dir
}

// TestFlowsRemoteMatchesLocal: GET /flows, over TLS with a client
// certificate and the token, answers the flows a local selection
// gives, as JSON lines.
func TestFlowsRemoteMatchesLocal(t *testing.T) {
	dir := flowsFixture(t)
	certs := pkiDir(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	since := time.Unix(0, flowtest.Base+30e6).UTC().Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name string
		p    Params
	}{
		{"everything", Params{}},
		{"agent", Params{Agents: []string{"a2"}}},
		{"iface", Params{Ifaces: []string{"eth0"}}},
		{"since", Params{Since: since}},
		{"filter", Params{Filter: "src net 10.0.0.0/8 and tcp"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fc, err := parseFlows(tc.p.Values(), dir, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			local, _, err := flowquery.Run(context.Background(), fc)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i := range local {
				b, _ := json.Marshal(local[i].JSON())
				want = append(want, string(b))
			}
			var got []string
			_, err = FetchFlows(context.Background(), ClientConfig{Addr: s.Addr(), TLS: clientTLS(t, certs, certs, "viewer"), Token: token, Params: tc.p},
				func(j *flowquery.JSON) error {
					b, _ := json.Marshal(j)
					got = append(got, string(b))
					return nil
				})
			if err != nil {
				t.Fatal(err)
			}
			if len(want) == 0 || strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("remote %d flows, local %d", len(got), len(want))
			}
		})
	}
}

// TestFlowsRefusals: GET /flows refuses as GET /query does: no
// certificate, no token, bad parameters (with 400 and the reason).
func TestFlowsRefusals(t *testing.T) {
	dir := flowsFixture(t)
	certs := pkiDir(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, TLS: serverTLS(t, certs), Token: token})
	good := clientTLS(t, certs, certs, "viewer")
	for _, tc := range []struct {
		name   string
		cfg    ClientConfig
		reason string
		is     error
	}{
		{"no client certificate", ClientConfig{TLS: clientTLS(t, certs, "", ""), Token: token}, "client certificate required", ErrRefused},
		{"no token", ClientConfig{TLS: good}, "token required", ErrRefused},
		{"bad time", ClientConfig{TLS: good, Token: token, Params: Params{Since: "yesterday"}}, "since: bad time", ErrBadRequest},
		{"bad filter", ClientConfig{TLS: good, Token: token, Params: Params{Filter: "udp port 99999"}}, "illegal port number", ErrBadRequest},
		{"filter beyond the limits", ClientConfig{TLS: good, Token: token, Params: Params{Filter: strings.Repeat("port 1 or ", 48) + "port 2"}}, "at most 48", ErrBadRequest},
		{"count", ClientConfig{TLS: good, Token: token, Params: Params{Count: 3}}, `unknown parameter "count"`, ErrBadRequest},
		{"agent path", ClientConfig{TLS: good, Token: token, Params: Params{Agents: []string{"../etc"}}}, "agent name", ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Addr = s.Addr()
			n := 0
			_, err := FetchFlows(context.Background(), tc.cfg, func(*flowquery.JSON) error { n++; return nil })
			if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.reason) || n != 0 {
				t.Errorf("err = %v (%d flows), want %v with %q", err, n, tc.is, tc.reason)
			}
		})
	}
}

// TestFlowsResult: GET /flows ends with its result (the Pcapsync-Result
// trailer): the local run's counts and kept range, and flowquery's
// reason when there was nothing to answer from, without the server's
// root; an answer without it, or with one that does not decode, is
// ErrFailed.
func TestFlowsResult(t *testing.T) {
	dir := flowsFixture(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir})
	fc, err := parseFlows(nil, dir, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, local, err := flowquery.Run(context.Background(), fc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		p         Params
		uncovered string
	}{
		{"everything", Params{}, ""},
		{"no agent", Params{Agents: []string{"zz"}}, "no agent of the root matches --agent zz; agents there: a1,a2"},
		{"before", Params{Until: time.Unix(0, flowtest.Base-1e9).UTC().Format(time.RFC3339)}, "the range is outside the data kept of the agents selected: they keep " + time.Unix(0, flowtest.Base).UTC().Format(time.RFC3339Nano) + " to "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			res, err := FetchFlows(context.Background(), ClientConfig{Addr: s.Addr(), Params: tc.p}, func(*flowquery.JSON) error { n++; return nil })
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(res.Uncovered, tc.uncovered) || (tc.uncovered == "") != (res.Uncovered == "") || strings.Contains(res.Uncovered, dir) {
				t.Errorf("uncovered %q, want %q", res.Uncovered, tc.uncovered)
			}
			if tc.uncovered == "" && (res.Flows != n || n != local.Flows || res.Files != local.Files || res.Agents != 2 ||
				res.Oldest != time.Unix(0, local.Kept.Min).UTC().Format(time.RFC3339Nano)) {
				t.Errorf("result %+v after %d flows, want the local run's %+v", res, n, local)
			}
		})
	}
	for _, tc := range []struct{ name, trailer string }{{"none", ""}, {"not JSON", "{"}, {"too long", `{"uncovered":"` + strings.Repeat("x", MaxFlowsResult) + `"}`}} {
		t.Run(tc.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", FlowsType)
				w.Header().Set("Trailer", TrailerResult)
				if tc.trailer != "" {
					w.Header().Set(TrailerResult, tc.trailer)
				}
			}))
			defer hs.Close()
			_, err := FetchFlows(context.Background(), ClientConfig{Addr: strings.TrimPrefix(hs.URL, "http://")}, func(*flowquery.JSON) error { return nil })
			if !errors.Is(err, ErrFailed) {
				t.Errorf("trailer %.20q: %v, want ErrFailed", tc.trailer, err)
			}
		})
	}
}

// TestFlowsCommunityID: GET /flows?community_id= answers the flows of
// that Community ID only: those of flowquery.Run over the whole root
// with that Community ID, each agent's (one seen by both agents, one by
// one, one by none); a hostile value is refused (400) as GET /query
// refuses it, before anything is read.
func TestFlowsCommunityID(t *testing.T) {
	dir := flowsFixture(t)
	s := startServer(t, Config{Listen: "127.0.0.1:0", Dir: dir, Logger: quiet()})
	all, _, err := flowquery.Run(context.Background(), flowquery.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	agents := map[string]map[string]bool{}
	for _, f := range all {
		if agents[f.CommunityID] == nil {
			agents[f.CommunityID] = map[string]bool{}
		}
		agents[f.CommunityID][f.Agent] = true
	}
	var both, one string
	for _, f := range all {
		switch n := len(agents[f.CommunityID]); {
		case n == 2 && both == "":
			both = f.CommunityID
		case n == 1 && one == "" && f.CommunityID != "":
			one = f.CommunityID
		}
	}
	if both == "" || one == "" {
		t.Fatalf("the fixture has no flow seen by both agents (%q) or by one (%q)", both, one)
	}
	for _, cid := range []string{both, one, "1:AAAAAAAAAAAAAAAAAAAAAAAAAAA="} {
		var want []string
		for i := range all {
			if all[i].CommunityID == cid {
				b, _ := json.Marshal(all[i].JSON())
				want = append(want, string(b))
			}
		}
		var got []string
		_, err := FetchFlows(context.Background(), ClientConfig{Addr: s.Addr(), Params: Params{CommunityID: cid}}, func(j *flowquery.JSON) error {
			b, _ := json.Marshal(j)
			got = append(got, string(b))
			return nil
		})
		if err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("community_id=%s: %v: %d flows, want %d\n got %q\nwant %q", cid, err, len(got), len(want), got, want)
		}
	}
	for _, q := range []string{"community_id=1:x", "community_id=" + url.QueryEscape(both) + "&community_id=" + url.QueryEscape(one),
		"community_id=" + strings.Repeat("A", 5000), "community_id=2:" + url.QueryEscape(both[2:]), "community_id=%00%ff",
		"community_id=" + url.QueryEscape(both+"\n"), "community_id=1:" + strings.Repeat("%C3%A9", 14)} {
		resp, err := http.Get("http://" + s.Addr() + FlowsPath + "?" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || len(body) > 200 {
			t.Errorf("GET /flows?%.60s: %d %.200q, want 400 with a short reason", q, resp.StatusCode, body)
		}
	}
}
