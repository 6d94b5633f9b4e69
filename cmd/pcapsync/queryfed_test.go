package main

import (
	"context"
	"encoding/json"

	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/federate"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
)

// fedPacket is a packet of a query's output as the federation test
// compares it.
type fedPacket struct {
	iface string
	ts    int64
	data  string
}

// readFedPackets reads a pcapng file: its packets, and the descriptions
// met for each interface name.
func readFedPackets(t *testing.T, file string) ([]fedPacket, map[string][]string) {
	t.Helper()
	var out []fedPacket
	ifaces := eachPacket(t, file, func(ifaces []pcapfile.Interface, p *pcapfile.Packet) {
		out = append(out, fedPacket{ifaces[p.Interface].Name, p.Timestamp, string(p.Data)})
	})
	descs := map[string][]string{}
	for _, ifc := range ifaces {
		descs[ifc.Name] = append(descs[ifc.Name], ifc.Description)
	}
	return out, descs
}

// fedRoots writes three roots (web1 on the first two, as after a
// failover, overlapping in time; aaa on the third at the same times as
// the first's web1, so timestamps tie across servers) and a copy of
// them merged into one, and serves each root's queries.
func fedRoots(t *testing.T, n int) (addrs []string, merged string) {
	t.Helper()
	merged = t.TempDir()
	last := time.Now().UnixMilli()
	for _, r := range []struct {
		base   int64
		agents []string
	}{
		{rootBase, []string{"web1", "web2"}},
		{rootBase + 20e6 + 500, []string{"web1", "db1"}},
		{rootBase, []string{"aaa"}},
	} {
		for time.Now().UnixMilli() == last { // file names are the ms they were made in: none the same
			runtime.Gosched()
		}
		dir := t.TempDir()
		roottest.Write(t, dir, r.base, 0, n, r.agents...)
		last = time.Now().UnixMilli()
		for _, a := range r.agents {
			testutil.CopyFiles(t, filepath.Join(dir, a), filepath.Join(merged, a))
		}
		addrs = append(addrs, startQueryServer(t, dir, "127.0.0.1:0", nil))
	}
	return addrs, merged
}

// TestQueryFederated: query --from over three servers gives the
// packets, order and interface names of the local query over a copy of
// their three roots merged, the agent on two servers kept apart by the
// server in its interfaces' descriptions; one server through --servers
// FILE gives the same as --from.
func TestQueryFederated(t *testing.T) {
	addrs, merged := fedRoots(t, 60)
	tmp := t.TempDir()
	list := filepath.Join(tmp, "servers")
	os.WriteFile(list, []byte("# the other two\n"+addrs[1]+"\n"+addrs[2]+"\n"), 0o644)
	for _, sel := range [][]string{nil, {"--count", "70"}, {"--agent", "web*", "udp"}} {
		t.Run(strings.Join(sel, " "), func(t *testing.T) {
			local, fed, fed2 := filepath.Join(tmp, "local"), filepath.Join(tmp, "fed"), filepath.Join(tmp, "fed2")
			if _, se, err := queryRun(append([]string{"query", "--dir", merged, "-w", local}, sel...)...); err != nil {
				t.Fatalf("local: %v %s", err, se)
			}
			if _, se, err := queryRun(append([]string{"query", "--from", strings.Join(addrs, ","), "--insecure", "-w", fed}, sel...)...); err != nil {
				t.Fatalf("federated: %v %s", err, se)
			}
			if _, se, err := queryRun(append([]string{"query", "--from", addrs[0], "--servers", list, "--insecure", "-w", fed2}, sel...)...); err != nil {
				t.Fatalf("--servers: %v %s", err, se)
			}
			want, _ := readFedPackets(t, local)
			got, descs := readFedPackets(t, fed)
			got2, _ := readFedPackets(t, fed2)
			if len(want) == 0 || !slices.Equal(got, want) || !slices.Equal(got2, want) {
				t.Fatalf("federated %d packets, --servers %d, local %d: not the same (first difference at %d)", len(got), len(got2), len(want), firstDiff(got, want))
			}
			if d := descs["web1:eth0"]; len(sel) < 2 && (len(d) != 2 || !strings.HasPrefix(d[0], "server "+addrs[0]+": eth0 on") || !strings.HasPrefix(d[1], "server "+addrs[1]+": ")) {
				t.Errorf("web1:eth0 described %q: want one interface per server", d)
			}
		})
	}
}

// TestQueryOneServerMerged: one server through the merge gives the
// packets of its byte-for-byte copy (query --from one server).
func TestQueryOneServerMerged(t *testing.T) {
	addrs, _ := fedRoots(t, 40)
	dir := t.TempDir()
	copied, merged := filepath.Join(dir, "copied"), filepath.Join(dir, "merged")
	if _, se, err := queryRun("query", "--from", addrs[1], "--insecure", "-w", copied); err != nil {
		t.Fatalf("%v %s", err, se)
	}
	f, err := os.Create(merged)
	if err != nil {
		t.Fatal(err)
	}
	_, err = federate.Run(context.Background(), federate.Config{Servers: []queryhttp.ClientConfig{{Addr: addrs[1]}}}, f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	want, _ := readFedPackets(t, copied)
	got, _ := readFedPackets(t, merged)
	if len(want) != 80 || !slices.Equal(got, want) {
		t.Errorf("merged %d packets, copied %d: first difference at %d", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []fedPacket) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// cutProxy forwards to target, and cuts the answer after n bytes.
func cutProxy(t *testing.T, target string, n int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(up, c)
				io.CopyN(c, up, n)
			}()
		}
	}()
	return ln.Addr().String()
}

// TestQueryFederatedFails: a server stopped mid-query, or one that
// says nothing, fails the query naming it (exit 1); with --partial the
// others' packets come (exit 4), the summary marking the server; the
// deadline holds.
func TestQueryFederatedFails(t *testing.T) {
	addrs, _ := fedRoots(t, 200)
	for _, tc := range []struct {
		name, bad, outcome string
	}{
		{"stopped", cutProxy(t, addrs[1], 6000), federate.OutcomeFailed},
		{"silent", stallAddr(t), federate.OutcomeTimedOut},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := strings.Join([]string{addrs[0], tc.bad, addrs[2]}, ",")
			out := filepath.Join(t.TempDir(), "out")
			start := time.Now()
			_, se, err := queryRun("query", "--from", from, "--insecure", "--server-timeout", "500ms", "-w", out)
			if exitCode(err) != 1 || !strings.Contains(err.Error(), tc.bad) || !strings.Contains(err.Error(), tc.outcome) {
				t.Errorf("default: exit %d, %v; stderr %s", exitCode(err), err, se)
			}
			_, se, err = queryRun("query", "--from", from, "--insecure", "--server-timeout", "500ms", "--partial", "--summary", "json", "-w", out)
			if exitCode(err) != 4 {
				t.Fatalf("--partial: exit %d, %v; stderr %s", exitCode(err), err, se)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("took %s", took)
			}
			var res federate.Result
			if err := json.Unmarshal([]byte(se[strings.Index(se, "{"):]), &res); err != nil {
				t.Fatalf("summary %q: %v", se, err)
			}
			pkts, _ := readFedPackets(t, out)
			n := 0
			for _, p := range pkts {
				if strings.HasPrefix(p.iface, "web2:") || strings.HasPrefix(p.iface, "aaa:") {
					n++
				}
			}
			s := res.Servers[1]
			if !res.Partial || s.Outcome != tc.outcome || res.Servers[0].Result == nil || n != 400 || int64(len(pkts)) != res.Packets {
				t.Errorf("partial: %d packets of the others (want 400), result %+v", n, res)
			}
		})
	}
}

// stallAddr is a listener that accepts and says nothing.
func stallAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestQueryFromStall: one server that says nothing is given up after
// --server-timeout, its answer copied byte for byte otherwise.
func TestQueryFromStall(t *testing.T) {
	start := time.Now()
	_, _, err := queryRun("query", "--from", stallAddr(t), "--insecure", "--server-timeout", "300ms", "-w", filepath.Join(t.TempDir(), "out"))
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "sent nothing for 300ms") || time.Since(start) > 10*time.Second {
		t.Errorf("exit %d, %v after %s", exitCode(err), err, time.Since(start))
	}
}

// TestQueryFederatedUsage: the flags of several servers, wrong.
func TestQueryFederatedUsage(t *testing.T) {
	dir := t.TempDir()
	srvs := startQueryServer(t, dir, "127.0.0.1:0", nil) + "," + startQueryServer(t, dir, "127.0.0.1:0", nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", dir, "--partial"}, "go with --from or --servers"},
		{[]string{"--dir", dir, "--server-timeout", "1s"}, "go with --from or --servers"},
		{[]string{"--from", "a:1,b:1", "--server-timeout", "0s", "--insecure"}, "--server-timeout 0s"},
		{[]string{"--from", "a:1,b:1", "--tls-server-name", "x", "--tls-ca", "/dev/null"}, "--tls-server-name"},
		{[]string{"--from", "a:1,a:1", "--insecure"}, "named twice"},
		{[]string{"--from", srvs, "--insecure", "--filter", "udp and ("}, "filter"},
	} {
		_, _, err := queryRun(append([]string{"query", "-w", "-"}, tc.args...)...)
		if exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: exit %d, %v; want usage error %q", tc.args, exitCode(err), err, tc.want)
		}
	}
}

// TestQueryFederatedUncovered: servers none of which holds an agent of
// the selection: exit 3, an empty pcapng written.
func TestQueryFederatedUncovered(t *testing.T) {
	a := startQueryServer(t, t.TempDir(), "127.0.0.1:0", nil)
	b := startQueryServer(t, writeRoot(t, 5, "web1"), "127.0.0.1:0", nil)
	out := filepath.Join(t.TempDir(), "out")
	_, se, err := queryRun("query", "--from", a+","+b, "--insecure", "--agent", "nosuch", "-w", out)
	if exitCode(err) != 3 || !strings.Contains(err.Error(), "nothing to answer from") {
		t.Errorf("exit %d, %v; stderr %s", exitCode(err), err, se)
	}
	if pkts, _ := readFedPackets(t, out); len(pkts) != 0 {
		t.Errorf("%d packets", len(pkts))
	}
	if _, _, err := queryRun("query", "--from", a+","+b, "--insecure", "-w", out); err != nil {
		t.Errorf("with web1: %v", err)
	}
}

// TestQueryFederatedTLS: the TLS flags apply to every server, each
// checked against its own host; a server whose certificate does not
// verify fails the query naming it, with the hint a single --from gives.
func TestQueryFederatedTLS(t *testing.T) {
	p := pkitest.New(t)
	cert, key := p.Issue(t, p.CA, "listener", pki.Leaf{CommonName: "collector", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	stc, err := pki.ServerConfig(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	a := startQueryServer(t, writeRoot(t, 5, "web1"), "127.0.0.1:0", stc)
	b := startQueryServer(t, writeRoot(t, 7, "db1"), "127.0.0.1:0", stc)
	so, se, err := queryRun("query", "--from", a+","+b, "--tls-ca", p.CAFile, "-w", "-")
	if err != nil || countStream(t, so) != 12 {
		t.Errorf("%v, stderr %s", err, se)
	}
	other := pkitest.New(t)
	_, _, err = queryRun("query", "--from", a+","+b, "--tls-ca", other.CAFile, "-w", "-")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), "--tls-ca") {
		t.Errorf("another CA: exit %d, %v", exitCode(err), err)
	}
}
