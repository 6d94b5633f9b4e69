//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestFederatedQuery: three collectors on three roots, the agents
// spread over them (web1 on the first two, as after a failover; every
// file starting at the same time, so timestamps tie across servers;
// db2 of another link type): query --from all three writes the
// packets, order and interface names of the local query over a copy of
// the three roots merged, and flows --from the flows of the copy. A
// range before anything kept exits 3 with each agent's kept range; a
// stopped server is timed out by --server-timeout; one killed while
// the query waits on it, and one stopped, fail the query naming it
// (exit 1), and --partial writes the local query's answer without the
// third's agent (exit 4).
func TestFederatedQuery(t *testing.T) {
	ctx := testContext(t)
	work := t.TempDir()
	const count = 2000
	const start = int64(1780000000_000000000)
	files := map[string]string{}
	for i, f := range []struct {
		name  string
		start int64
		lt    uint16
	}{
		{"web1a", start, 0}, {"web1b", start + 1e9, 0}, {"web2", start, 0}, {"db1", start, 0}, {"db2", start, gen.LinkTypeRaw},
	} {
		files[f.name] = filepath.Join(work, f.name+".pcap")
		writeGenFile(t, files[f.name], gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(i + 1), Seed: uint64(i + 1), Start: f.start, LinkType: f.lt})
	}
	type server struct {
		dir, addr, query string
		coll             *proc
	}
	servers := make([]server, 3)
	for i := range servers {
		s := &servers[i]
		s.dir, s.addr = filepath.Join(work, fmt.Sprintf("root%d", i)), freeport.Addr(t)
		s.query = fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
		s.coll = startCollector(t, ctx, "", s.addr, s.dir, "--query-listen", s.query)
	}
	replay := func(srv int, agent, file string) *proc {
		return startReplay(t, ctx, servers[srv].addr, agent, files[file])
	}
	web1 := replay(0, "web1", "web1a")
	others := []*proc{replay(0, "web2", "web2"), replay(1, "db1", "db1"), replay(2, "db2", "db2")}
	finishReplay(t, web1, count, 30*time.Second)
	others = append(others, replay(1, "web1", "web1b")) // failed over to the second
	for _, p := range others {
		finishReplay(t, p, count, 30*time.Second)
	}
	merged := filepath.Join(work, "merged")
	for _, s := range servers {
		waitNoPart(t, s.dir, 10*time.Second)
		agents, _ := filepath.Glob(filepath.Join(s.dir, "[a-z]*"))
		for _, a := range agents {
			testutil.CopyFiles(t, a, filepath.Join(merged, filepath.Base(a)))
		}
	}
	run := func(want int, args ...string) *proc { // pcapsync args, its exit status want
		t.Helper()
		q := startProc(t, ctx, args[0], "", args...)
		if code := q.wait(30 * time.Second); code != want {
			t.Fatalf("%q exited %d, want %d: %s", args, code, want, q.stderr.String())
		}
		return q
	}
	from := servers[0].query + "," + servers[1].query + "," + servers[2].query
	local, fed := filepath.Join(work, "local.pcapng"), filepath.Join(work, "fed.pcapng")
	run(0, "query", "--dir", merged, "-w", local)
	run(0, "query", "--from", from, "--insecure", "-w", fed)
	sameQueryPackets(t, fed, local, 5*count)

	// The flows alike: those of the merged copy, each naming its server
	// (web1's apart on its two).
	sameFlows(t, run(0, "flows", "--from", from, "--insecure", "--json").stdout.String(),
		run(0, "flows", "--dir", merged, "--json").stdout.String())
	top := []string{"--top", "10", "--by", "bytes", "--group", "pair", "--csv"}
	if f, l := run(0, append([]string{"flows", "--from", from, "--insecure"}, top...)...).stdout.String(),
		run(0, append([]string{"flows", "--dir", merged}, top...)...).stdout.String(); f != l || !strings.Contains(l, "\n198.") {
		t.Errorf("flows --top over the servers:\n%s\nover the merged copy:\n%s", f, l)
	}
	// A range before anything kept: nothing to answer from (exit 3),
	// each server's coverage in the summary saying what its agents keep.
	q := run(3, "query", "--from", from, "--insecure", "--until", time.Unix(0, start).Add(-time.Hour).UTC().Format(time.RFC3339), "-w", fed, "--summary", "json")
	if se := q.stderr.String(); !strings.Contains(se, "nothing to answer from") || strings.Count(se, `"oldest"`) < 4 {
		t.Errorf("a range before the data: stderr %q, want nothing to answer from and each agent's kept range", se)
	}
	// A server that stalls (stopped): the deadline gives it up, named.
	servers[1].coll.signal(syscall.SIGSTOP)
	q = run(1, "query", "--from", from, "--insecure", "--server-timeout", "1s", "-w", fed)
	servers[1].coll.signal(syscall.SIGCONT)
	if se := q.stderr.String(); !strings.Contains(se, servers[1].query) || !strings.Contains(se, "timed out") {
		t.Errorf("a stalled server: stderr %q, want it named, timed out", se)
	}
	// One stopped mid-query: connected to (the kernel accepts for the
	// stopped process), then killed: the query fails naming it.
	servers[2].coll.signal(syscall.SIGSTOP)
	q = startProc(t, ctx, "query", "", "query", "--from", from, "--insecure", "-w", fed)
	if err := testutil.Poll(10*time.Second, func() error { return established(servers[2].coll.cmd.Process.Pid, servers[2].query) }); err != nil {
		t.Fatal(err)
	}
	servers[2].coll.signal(syscall.SIGKILL)
	servers[2].coll.wait(10 * time.Second)
	if code := q.wait(30 * time.Second); code != 1 || !strings.Contains(q.stderr.String(), servers[2].query) {
		t.Errorf("a server killed mid-query: exit %d, stderr %q; want 1 naming it", code, q.stderr.String())
	}
	q = run(1, "query", "--from", from, "--insecure", "-w", fed)
	if se := q.stderr.String(); !strings.Contains(se, servers[2].query) || !strings.Contains(se, "unreachable") {
		t.Errorf("stderr %q: want the stopped server named, unreachable", se)
	}
	run(0, "query", "--dir", merged, "--agent", "web*,db1", "-w", local)
	run(4, "query", "--from", from, "--insecure", "--partial", "-w", fed)
	sameQueryPackets(t, fed, local, 4*count)
}

// established reports nil once a TCP connection to the listener at
// addr of process pid is established (the kernel accepts for a stopped
// process too). It reads the process's own view (/proc/PID/net): the
// test's /proc/self/net is its main thread's, which a namespace test
// may have left elsewhere.
func established(pid int, addr string) error {
	_, port, _ := strings.Cut(addr, ":")
	p, _ := strconv.Atoi(port)
	for _, f := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		for line := range strings.Lines(string(b)) {
			// sl local_address rem_address st ...: st 01 is ESTABLISHED.
			if fs := strings.Fields(line); len(fs) > 3 && fs[3] == "01" && strings.HasSuffix(fs[1], fmt.Sprintf(":%04X", p)) {
				return nil
			}
		}
	}
	return fmt.Errorf("no connection to %s established", addr)
}

// sameFlows checks that fed, flows --from's JSON lines, are local's
// (flows --dir over the merged copy) in local's order, but for the
// server each names.
func sameFlows(t *testing.T, fed, local string) {
	t.Helper()
	f, l := strings.Split(strings.TrimSpace(fed), "\n"), strings.Split(strings.TrimSpace(local), "\n")
	if len(l) < 5 || len(f) != len(l) { // one flow at least per file replayed
		t.Fatalf("%d flows over the servers, %d over the merged copy", len(f), len(l))
	}
	for i := range l {
		var m map[string]any
		if err := json.Unmarshal([]byte(f[i]), &m); err != nil || m["server"] == nil {
			t.Fatalf("flow %d over the servers: %q: %v, want a server named", i, f[i], err)
		}
		delete(m, "server")
		var w map[string]any
		if err := json.Unmarshal([]byte(l[i]), &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(m, w) {
			t.Fatalf("flow %d: over the servers %v, over the merged copy %v", i, m, w)
		}
	}
}

// sameQueryPackets checks that got holds want's packets (interface name,
// time, bytes) in want's order, n of them.
func sameQueryPackets(t *testing.T, got, want string, n int) {
	t.Helper()
	g, gi := readAll(t, got)
	w, wi := readAll(t, want)
	if len(w) != n || len(g) != len(w) {
		t.Fatalf("%d packets, want %d (local query %d)", len(g), n, len(w))
	}
	for i := range w {
		a, b := g[i], w[i]
		if gi[a.Interface].Name != wi[b.Interface].Name || a.Timestamp != b.Timestamp || !slices.Equal(a.Data, b.Data) {
			t.Fatalf("packet %d: %s at %d, want %s at %d", i, gi[a.Interface].Name, a.Timestamp, wi[b.Interface].Name, b.Timestamp)
		}
	}
}
