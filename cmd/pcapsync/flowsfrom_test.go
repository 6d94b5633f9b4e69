package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/testutil/flowtest"
)

// flowRoots3 writes three roots, agent s on two of them (as after a
// failover: its conversations split between them, its files named
// apart), and a fourth holding a copy of all three; it returns the
// three roots and the copy.
func flowRoots3(t *testing.T) ([3]string, string) {
	t.Helper()
	ps := flowtest.GenPackets(flowtest.GenConvs(11, 40))
	split := &flow.Config{SplitPackets: 10}
	spread := [3][]flowtest.Agent{
		{{Name: "a", Iface: "a:eth0", PerFile: 97}},
		{{Name: "b", Iface: "b:eth1", PerFile: 60, Keep: func(c int) bool { return c%2 == 0 }},
			{Name: "s", Iface: "s:eth0", PerFile: 50, Keep: func(c int) bool { return c%3 == 1 }}},
		{{Name: "s", Iface: "s:eth0", PerFile: 50, Keep: func(c int) bool { return c%3 == 2 }, Names: 500 * time.Millisecond}},
	}
	var roots [3]string
	merged := t.TempDir()
	for i, agents := range spread {
		roots[i] = t.TempDir()
		for _, a := range agents {
			flowtest.WriteRoot(t, roots[i], ps, []flowtest.Agent{a}, split)
			flowtest.WriteRoot(t, merged, ps, []flowtest.Agent{a}, split)
		}
	}
	return roots, merged
}

// execFlows runs pcapsync flows args as the binary does and returns
// stdout, stderr and the exit status.
func execFlows(args ...string) (string, string, int) {
	var so, se bytes.Buffer
	code := execute(context.Background(), append([]string{"flows"}, args...), &so, &se)
	return so.String(), se.String(), code
}

// withoutServer returns the lines of out (JSON objects or CSV rows)
// without their server, sorted, and the servers named.
func withoutServer(t *testing.T, out string, isCSV bool) ([]string, map[string]int) {
	t.Helper()
	servers := map[string]int{}
	var lines []string
	if isCSV {
		rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(rows) == 0 {
			t.Fatalf("csv %q: %v", out, err)
		}
		last := len(rows[0]) // no server column: a local run's
		if rows[0][last-1] == "server" {
			last--
		}
		for _, r := range rows[1:] {
			if last < len(r) {
				servers[r[last]]++
			}
			lines = append(lines, strings.Join(r[:last], ","))
		}
		slices.Sort(lines)
		return lines, servers
	}
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		strip := func(m map[string]any) {
			if s, ok := m["server"].(string); ok {
				servers[s]++
			}
			delete(m, "server")
		}
		strip(m)
		if seen, ok := m["seen"].([]any); ok { // --same
			for _, s := range seen {
				strip(s.(map[string]any))
			}
		}
		b, _ := json.Marshal(m)
		lines = append(lines, string(b))
	}
	slices.Sort(lines)
	return lines, servers
}

// TestFlowsFromMany: flows --from three servers prints the flows of
// flows --dir over a copy of the three roots, each saying its server
// (agent s's flows by the server that holds them), in every output
// form; --top sums over all of them.
func TestFlowsFromMany(t *testing.T) {
	roots, merged := flowRoots3(t)
	var addrs []string
	for _, r := range roots {
		addrs = append(addrs, startQueryServer(t, r, "127.0.0.1:0", nil))
	}
	from := []string{"--from", strings.Join(addrs, ","), "--insecure"}
	for _, args := range [][]string{
		{"--json"}, {"--csv"}, {"--json", "--agent", "s"}, {"--same", "--json"}, {"--json", "--sort", "bytes", "udp or icmp"},
	} {
		local := runFlows(t, append([]string{"--dir", merged}, args...)...)
		remote := runFlows(t, append(slices.Clone(from), args...)...)
		isCSV := slices.Contains(args, "--csv")
		want, _ := withoutServer(t, local, isCSV)
		got, servers := withoutServer(t, remote, isCSV)
		if len(want) == 0 || !slices.Equal(got, want) {
			t.Errorf("%q: --from differs from --dir over the copy:\n%s\n---\n%s", args, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if len(servers) != 3 && !slices.Contains(args, "--agent") {
			t.Errorf("%q: servers named %v, want all three", args, servers)
		}
	}
	// Agent s: its flows by the two servers that hold them.
	_, servers := withoutServer(t, runFlows(t, append(slices.Clone(from), "--json", "--agent", "s")...), false)
	if servers[addrs[0]] != 0 || servers[addrs[1]] == 0 || servers[addrs[2]] == 0 {
		t.Errorf("agent s by server: %v, want from %s and %s only", servers, addrs[1], addrs[2])
	}
	for _, args := range [][]string{{"--top", "5", "--group", "pair"}, {"--top", "3", "--group", "agent", "--by", "flows"}, {"--top", "4", "--csv"}} {
		local := runFlows(t, append([]string{"--dir", merged}, args...)...)
		if remote := runFlows(t, append(slices.Clone(from), args...)...); remote != local {
			t.Errorf("%q: --top over three servers:\n%s\n---\n%s", args, remote, local)
		}
	}
	if table := runFlows(t, from...); !strings.HasPrefix(table, "SERVER") || !strings.Contains(table, addrs[2]) {
		t.Errorf("table of three servers has no SERVER column:\n%s", table)
	}
}

// stallingServer accepts connections and says nothing until the test
// ends; it returns its address.
func stallingServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// stoppedServer returns an address where nothing listens any more.
func stoppedServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestFlowsFromFailedServer: a server stopped or stalling fails flows
// --from, naming it (exit 1); with --partial the others' flows are
// printed, the outcomes on stderr, exit 4. The stall is cut at
// --server-timeout.
func TestFlowsFromFailedServer(t *testing.T) {
	roots, _ := flowRoots3(t)
	good := startQueryServer(t, roots[0], "127.0.0.1:0", nil)
	want := strings.Count(runFlows(t, "--json", "--dir", roots[0]), "\n")
	for _, tc := range []struct {
		name, bad, outcome string
	}{
		{"stopped", stoppedServer(t), "unreachable"},
		{"stalling", stallingServer(t), "timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--json", "--insecure", "--server-timeout", "300ms", "--from", good + "," + tc.bad}
			start := time.Now()
			so, se, code := execFlows(args...)
			if code != 1 || so != "" || !strings.Contains(se, tc.bad+": "+tc.outcome) {
				t.Errorf("default: exit %d, stdout %q, stderr %q; want 1 naming %s %s", code, so, se, tc.bad, tc.outcome)
			}
			so, se, code = execFlows(append(args, "--partial")...)
			if code != 4 || strings.Count(so, "\n") != want || !strings.Contains(se, "partial answer") ||
				!strings.Contains(se, "server "+good+": ok") || !strings.Contains(se, tc.bad+": "+tc.outcome) {
				t.Errorf("--partial: exit %d, %d flows (want %d), stderr %q", code, strings.Count(so, "\n"), want, se)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %s: the deadline did not hold", d)
			}
		})
	}
	if _, se, code := execFlows("--json", "--insecure", "--partial", "--server-timeout", "300ms", "--from", stoppedServer(t)); code != 1 {
		t.Errorf("--partial, every server failed: exit %d (%s), want 1", code, se)
	}
}

// TestFlowsFromCoverage: flows --from prints each server's result in
// the summary (flows, data files, those without flow records, the
// data kept), text and JSON, and exits 3 with each server's reason when
// no server had anything to answer from (an --agent matching nothing
// anywhere, a range before every server's data), for one server as for
// many; one server covering is an answer (exit 0), however empty.
func TestFlowsFromCoverage(t *testing.T) {
	roots, _ := flowRoots3(t)
	flowFiles, _ := filepath.Glob(filepath.Join(roots[0], "a", "*"+flow.Suffix))
	if len(flowFiles) < 3 {
		t.Fatalf("root 0 has %d flow files", len(flowFiles))
	}
	for _, p := range flowFiles[:2] {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	var addrs []string
	for _, r := range roots {
		addrs = append(addrs, startQueryServer(t, r, "127.0.0.1:0", nil))
	}
	from := []string{"--insecure", "--from", strings.Join(addrs, ",")}
	so, se, code := execFlows(append(slices.Clone(from), "--json", "--summary", "json")...)
	var sum struct {
		Flows   int `json:"flows"`
		Servers []struct {
			Server  string `json:"server"`
			Outcome string `json:"outcome"`
			Flows   int    `json:"flows"`
			Result  struct {
				Flows   int    `json:"flows"`
				Files   int    `json:"files"`
				NoFlows int    `json:"files_without_flows"`
				Oldest  string `json:"oldest"`
			} `json:"result"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(se), &sum); code != 0 || err != nil {
		t.Fatalf("exit %d, summary %q: %v", code, se, err)
	}
	if sum.Flows != strings.Count(so, "\n") || len(sum.Servers) != 3 {
		t.Fatalf("summary %+v, want %d flows from 3 servers", sum, strings.Count(so, "\n"))
	}
	base := time.Unix(0, flowtest.Base).UTC()
	for i, v := range sum.Servers {
		r := v.Result
		oldest, err := time.Parse(time.RFC3339Nano, r.Oldest)
		if v.Server != addrs[i] || v.Outcome != "ok" || v.Flows == 0 || r.Flows != v.Flows || r.Files == 0 ||
			err != nil || oldest.Before(base) || (r.NoFlows == 2) != (i == 0) {
			t.Errorf("server %d: %+v, want %s ok, its flows, files and kept range, 2 files without flows on the first only", i, v, addrs[i])
		}
	}
	_, se, _ = execFlows(from...)
	if want := "pcapsync flows: server " + addrs[0] + ": ok, "; !strings.Contains(se, want) ||
		!strings.Contains(se, "; 2 data files without flow records") || !strings.Contains(se, "; keeps "+base.Format(time.RFC3339Nano)) {
		t.Errorf("text summary %q: want each server's line, the files without flow records and the kept range", se)
	}
	before := base.Add(-time.Hour).Format(time.RFC3339)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{append(slices.Clone(from), "--agent", "zz"), 3, addrs[2] + ": no agent of the root matches --agent zz; agents there: s"},
		// The first server's files without flow records: their times not
		// known, it may hold flows of any range; not of agent s.
		{append(slices.Clone(from), "--until", before), 0, ""},
		{append(slices.Clone(from), "--agent", "s", "--until", before), 3, addrs[1] + ": the range is outside the data kept of the agents selected"},
		{[]string{"--insecure", "--from", addrs[0], "--agent", "zz"}, 3, "nothing to answer from: no agent of the root matches --agent zz; agents there: a\n"},
		{append(slices.Clone(from), "--agent", "a"), 0, ""},         // one server covers
		{append(slices.Clone(from), "--json", "tcp port 9"), 0, ""}, // covered, no such flow
	} {
		so, se, code := execFlows(tc.args...)
		if code != tc.code || !strings.Contains(se, tc.want) || strings.Contains(se, roots[0]) {
			t.Errorf("flows %q: exit %d, stderr %q; want exit %d with %q, no server path", tc.args, code, se, tc.code, tc.want)
		}
		if tc.code == 3 && strings.Contains(so, "{") {
			t.Errorf("flows %q: printed %q", tc.args, so)
		}
	}
}
