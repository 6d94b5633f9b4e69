package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestFederatedQuery: three collectors on three roots, the agents
// spread over them (web1 on the first two, as after a failover; every
// file starting at the same time, so timestamps tie across servers;
// db2 of another link type): query --from all three writes the
// packets, order and interface names of the local query over a copy of
// the three roots merged. With the third stopped, the query fails
// naming it (exit 1), and --partial writes the local query's answer
// without the third's agent (exit 4).
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
			copyDir(t, a, filepath.Join(merged, filepath.Base(a)))
		}
	}
	query := func(want int, args ...string) *proc {
		t.Helper()
		q := startProc(t, ctx, "query", "", append([]string{"query"}, args...)...)
		if code := q.wait(30 * time.Second); code != want {
			t.Fatalf("query %q exited %d, want %d: %s", args, code, want, q.stderr.String())
		}
		return q
	}
	from := servers[0].query + "," + servers[1].query + "," + servers[2].query
	local, fed := filepath.Join(work, "local.pcapng"), filepath.Join(work, "fed.pcapng")
	query(0, "--dir", merged, "-w", local)
	query(0, "--from", from, "--insecure", "-w", fed)
	sameQueryPackets(t, fed, local, 5*count)

	servers[2].coll.stop(10 * time.Second)
	q := query(1, "--from", from, "--insecure", "-w", fed)
	if se := q.stderr.String(); !strings.Contains(se, servers[2].query) || !strings.Contains(se, "unreachable") {
		t.Errorf("stderr %q: want the stopped server named, unreachable", se)
	}
	query(0, "--dir", merged, "--agent", "web*,db1", "-w", local)
	query(4, "--from", from, "--insecure", "--partial", "-w", fed)
	sameQueryPackets(t, fed, local, 4*count)
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

// copyDir copies the files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dst, e.Name())); err == nil {
			t.Fatalf("%s in two roots", e.Name())
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
