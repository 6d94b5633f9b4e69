package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// startStatusServer starts a query listener whose GET /status serves
// agents, until the test ends; it returns its address.
func startStatusServer(t *testing.T, agents ...string) string {
	t.Helper()
	st := metrics.Status{Time: time.Now().UTC(), Agents: []metrics.AgentStatus{}}
	for _, a := range agents {
		st.Agents = append(st.Agents, metrics.AgentStatus{Name: a, Connected: true, Since: st.Time.Add(-time.Minute), Packets: 42})
	}
	s, err := queryhttp.New(queryhttp.Config{Listen: "127.0.0.1:0", Dir: t.TempDir(), Status: func() any { return st },
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, "query server", s.Run)
	return s.Addr()
}

// execStatus runs pcapsync status args as the binary does.
func execStatus(args ...string) (string, string, int) {
	var so, se bytes.Buffer
	code := execute(context.Background(), append([]string{"status"}, args...), &so, &se)
	return so.String(), se.String(), code
}

// TestStatusFrom: status --from asks GET /status of every query
// listener: one table with a SERVER column, a server that is down a row
// saying so (exit 4), --json one document of every server; none
// answering is exit 1. A collector's query listener serves the status
// its metrics listener serves.
func TestStatusFrom(t *testing.T) {
	query := startCollector(t, "127.0.0.1:0", "--insecure", "--query-listen", "127.0.0.1:0").query
	if query == "" {
		t.Fatal("the collector logged no query listener")
	}
	web, db := startStatusServer(t, "web1", "web2"), startStatusServer(t, "db1")
	down := stoppedServer(t)
	from := []string{"--insecure", "--timeout", "2s", "--from", strings.Join([]string{web, db, down, query}, ",")}

	so, se, code := execStatus(from...)
	if code != 4 || !strings.Contains(se, down+": unreachable") {
		t.Errorf("one server down: exit %d, stderr %q; want 4 naming %s", code, se, down)
	}
	lines := strings.Split(so, "\n")
	if !strings.HasPrefix(lines[0], "SERVER") || !strings.Contains(lines[0], "AGENT") {
		t.Fatalf("no SERVER column:\n%s", so)
	}
	for _, want := range []string{
		`(?m)^` + regexp.QuoteMeta(web) + `\s+web1\s`, `(?m)^` + regexp.QuoteMeta(web) + `\s+web2\s`, `(?m)^` + regexp.QuoteMeta(db) + `\s+db1\s`,
		`(?m)^` + regexp.QuoteMeta(down) + `\s.*SERVER UNREACHABLE`, `4 servers, 3 answered; 3 agents, 3 connected`,
	} {
		if !regexp.MustCompile(want).MatchString(so) {
			t.Errorf("table lacks %s:\n%s", want, so)
		}
	}

	so, _, code = execStatus(append(from, "--json")...)
	var doc struct {
		Servers []struct {
			Server, Outcome string
			Status          *metrics.Status
		}
	}
	if err := json.Unmarshal([]byte(so), &doc); err != nil || code != 4 || len(doc.Servers) != 4 {
		t.Fatalf("--json: exit %d, %v:\n%s", code, err, so)
	}
	for i, want := range []struct {
		outcome string
		agents  int
	}{{"ok", 2}, {"ok", 1}, {"unreachable", -1}, {"ok", 0}} {
		s := doc.Servers[i]
		if s.Outcome != want.outcome || (want.agents < 0) != (s.Status == nil) || (s.Status != nil && len(s.Status.Agents) != want.agents) {
			t.Errorf("--json server %d: %+v, want %+v", i, s, want)
		}
	}
	// The collector's query listener serves what its metrics listener does.
	if s := doc.Servers[3].Status; s == nil || s.Agents == nil || s.RateWindow < 0 {
		t.Errorf("the collector's status over its query listener: %+v", s)
	}

	if _, se, code := execStatus("--insecure", "--timeout", "2s", "--from", down); code != 1 || !strings.Contains(se, "no server gave its status") {
		t.Errorf("every server down: exit %d, stderr %q; want 1", code, se)
	}
	if _, _, code := execStatus("--insecure", "--from", web, "--metrics", "127.0.0.1:1"); code != 2 {
		t.Errorf("--from with --metrics: exit %d, want 2", code)
	}
}
