package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin wherever the tests run

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/pktline"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
)

// rootBase is the first timestamp of writeRoot's packets.
var rootBase = time.Date(2026, 11, 27, 8, 15, 50, 0, time.UTC).UnixNano()

// writeRoot writes n packets per agent below a new output root
// (roottest.Write from rootBase): on eth0 and eth1 alternately, 1 ms
// apart, UDP 198.18.0.1.40000 > 198.18.0.2.5555 of 64+i bytes.
func writeRoot(t *testing.T, n int, agents ...string) string {
	t.Helper()
	dir := t.TempDir()
	roottest.Write(t, dir, rootBase, 0, n, agents...)
	return dir
}

// startQueryServer serves dir's queries on a loopback address (plain
// HTTP beside TLS when tc is set) until the test ends, and returns its
// address.
func startQueryServer(t *testing.T, dir, listen string, tc *tls.Config) string {
	t.Helper()
	s, err := queryhttp.New(queryhttp.Config{Listen: listen, Dir: dir, TLS: tc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, "query server", s.Run)
	return s.Addr()
}

// runUntilEnd runs run in a goroutine until the test ends, then
// cancels its context and waits for it; its error fails the test.
func runUntilEnd(t *testing.T, what string, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// queryRun runs pcapsync with args and returns stdout, stderr and its
// error.
func queryRun(args ...string) (stdout, stderr string, err error) {
	var so, se bytes.Buffer
	err = run(context.Background(), args, &so, &se)
	return so.String(), se.String(), err
}

// TestQueryText: without -w, query prints one line per packet (time in
// the local zone, AGENT:IF, addresses, ports, protocol), locally and
// over --from; -w - is still the pcapng, and --print adds the lines to
// -w FILE.
func TestQueryText(t *testing.T) {
	const n = 20
	dir := writeRoot(t, n, "web1")
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	want := func(i int) string {
		ts := time.Unix(0, rootBase+int64(i)*1e6).In(time.Local).Format(pktline.TimeLayout)
		return fmt.Sprintf("%s web1:eth%d IP 198.18.0.1.40000 > 198.18.0.2.5555: UDP, length %d", ts, i%2, 64+i-14-20-8)
	}
	check := func(t *testing.T, out string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != n {
			t.Fatalf("%d lines, want %d:\n%s", len(lines), n, out)
		}
		for i, l := range lines {
			if l != want(i) {
				t.Errorf("line %d:\n got %s\nwant %s", i, l, want(i))
			}
		}
	}
	for _, args := range [][]string{
		{"query", "--dir", dir},
		{"query", "--from", addr, "--insecure"},
		{"query", "--dir", dir, "-w", filepath.Join(t.TempDir(), "out.pcapng"), "--print"},
	} {
		t.Run(strings.Join(args[1:], " "), func(t *testing.T) {
			so, se, err := queryRun(args...)
			if err != nil {
				t.Fatalf("%v (stderr %s)", err, se)
			}
			check(t, so)
			if !strings.Contains(se, "pcapsync query: 20 packets") {
				t.Errorf("stderr %q, want the summary", se)
			}
		})
	}
	t.Run("print writes the file too", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out.pcapng")
		if _, se, err := queryRun("query", "--dir", dir, "-w", out, "--print"); err != nil {
			t.Fatalf("%v (stderr %s)", err, se)
		}
		if got := countPackets(t, out); got != n {
			t.Errorf("-w %s: %d packets, want %d", out, got, n)
		}
	})
	t.Run("-w - is the pcapng", func(t *testing.T) {
		so, se, err := queryRun("query", "--dir", dir, "-w", "-")
		if err != nil {
			t.Fatalf("%v (stderr %s)", err, se)
		}
		if k := countStream(t, so); k != n {
			t.Errorf("%d packets, want %d", k, n)
		}
	})
}

func countPackets(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return countIn(t, f)
}

// countIn counts the packets of the pcap or pcapng in r.
func countIn(t *testing.T, r io.Reader) int {
	t.Helper()
	pr, err := pcapfile.NewReader(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p pcapfile.Packet
	k := 0
	for pr.ReadInto(&p) == nil {
		k++
	}
	return k
}

func countStream(t *testing.T, s string) int {
	t.Helper()
	return countIn(t, strings.NewReader(s))
}

// TestQueryNothingToAnswer: a selection that matches no agent or no
// interface, or a range before the oldest packet kept, exits 3 with a
// message naming what there is (the agents, the interfaces, the kept
// range), locally and over --from, and still writes its (empty)
// pcapng; a filter that matches nothing inside the data kept is a real
// empty answer (exit 0, as tcpdump), as is an --iface that matches.
func TestQueryNothingToAnswer(t *testing.T) {
	dir := writeRoot(t, 10, "web1")
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	before := time.Unix(0, rootBase).Add(-time.Hour).UTC().Format(time.RFC3339)
	kept := time.Unix(0, rootBase).UTC().Format(time.RFC3339Nano)
	for _, src := range [][]string{{"--dir", dir}, {"--from", addr, "--insecure"}} {
		for _, tc := range []struct {
			args []string
			code int
			want []string // in the error
		}{
			{[]string{"--agent", "db*"}, 3, []string{"nothing to answer from: no agent of ", "matches --agent db*; agents there: web1"}},
			{[]string{"--iface", "eth9"}, 3, []string{"nothing to answer from: no interface with packets in the range matches --iface eth9; interfaces there: web1:eth0,web1:eth1"}},
			{[]string{"--until", before}, 3, []string{"nothing to answer from: the range", "is outside the data kept of every agent selected: web1 keeps " + kept + " to "}},
			{[]string{"udp port 9"}, 0, nil},
			{[]string{"--iface", "web1:eth1,eth7"}, 0, nil},
		} {
			args := append(append([]string{"query", "-w", "-"}, src...), tc.args...)
			so, se, err := queryRun(args...)
			code := 0
			if err != nil {
				code = exitCode(err)
			}
			if code != tc.code {
				t.Errorf("%q: %v (exit %d), want exit %d (stderr %s)", args, err, code, tc.code, se)
				continue
			}
			for _, w := range tc.want {
				if !strings.Contains(fmt.Sprint(err), w) {
					t.Errorf("%q: %v, want %q in it", args, err, w)
				}
			}
			if n := countStream(t, so); tc.code == 3 && n != 0 || tc.code == 0 && strings.Contains(tc.args[0], "port") && n != 0 {
				t.Errorf("%q: %d packets written", args, n)
			}
		}
	}
}

// TestQueryLocalTime: --since and --until take the lines' time (and
// Wireshark's) in the system's zone, locally and over --from, where the
// client resolves it; with a zone or an offset as given.
func TestQueryLocalTime(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	old := localZone
	localZone = berlin // as TZ=Europe/Berlin sets time.Local at the start
	t.Cleanup(func() { localZone = old })
	dir := writeRoot(t, 100, "web1")
	addr := startQueryServer(t, dir, "127.0.0.1:0", nil)
	// rootBase is 08:15:50 UTC, 09:15:50 in Berlin.
	for _, tc := range []struct {
		since, until string
		want         int
	}{
		{"2026-11-27 09:15:50.050", "", 50},
		{"2026-11-27 09:15:50.010000000", "2026-11-27 09:15:50.020", 10},
		{"2026-11-27T08:15:50.090Z", "", 10},
		{"2026-11-27 10:15:50.090+02:00", "", 10},
		{"2026-11-27 09:15:51", "", -3}, // after the last packet kept: exit 3
	} {
		for _, src := range [][]string{{"--dir", dir}, {"--from", addr, "--insecure"}} {
			args := []string{"query", "-w", "-", "--since", tc.since}
			if tc.until != "" {
				args = append(args, "--until", tc.until)
			}
			so, se, err := queryRun(append(args, src...)...)
			if tc.want < 0 && exitCode(err) == -tc.want {
				continue
			}
			if err != nil {
				t.Fatalf("%q: %v (stderr %s)", args, err, se)
			}
			if got := countStream(t, so); got != tc.want {
				t.Errorf("%q %s: %d packets, want %d", args, src[0], got, tc.want)
			}
		}
	}
}

// TestQueryFrom: --from takes HOST:PORT, [V6]:PORT and
// https://HOST:PORT; other schemes, paths and malformed addresses are
// usage errors (exit 2) that say what to give.
func TestQueryFrom(t *testing.T) {
	dir := writeRoot(t, 5, "web1")
	p := pkitest.New(t)
	cert, key := p.Issue(t, p.CA, "listener", pki.Leaf{CommonName: "collector", IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, Server: true})
	stc, err := pki.ServerConfig(cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	addr := startQueryServer(t, dir, "127.0.0.1:0", stc) // TLS, and plain on loopback
	_, port, _ := net.SplitHostPort(addr)
	ca := p.CAFile
	ok := [][]string{
		{"--from", addr, "--insecure"},
		{"--from", addr, "--tls-ca", ca},
		{"--from", "https://" + addr, "--tls-ca", ca},
		{"--from", "https://" + addr + "/", "--tls-ca", ca},
		{"--from", "HTTPS://" + addr, "--tls-ca", ca},
	}
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		ln.Close()
		v6 := startQueryServer(t, dir, "[::1]:0", stc)
		ok = append(ok, []string{"--from", v6, "--insecure"}, []string{"--from", "https://" + v6, "--tls-ca", ca})
	} else {
		t.Logf("no IPv6 loopback (%v): [V6]:PORT not tried", err)
	}
	for _, args := range ok {
		so, se, err := queryRun(append([]string{"query", "-w", "-"}, args...)...)
		if err != nil || countStream(t, so) != 5 {
			t.Errorf("%q: %v, stderr %s", args, err, se)
		}
	}
	// A failed handshake says what to give.
	plain := startQueryServer(t, dir, "127.0.0.1:0", nil)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", addr}, "give --tls-ca FILE, the CA that signed the collector's certificate (gen certs: ca.pem); or --insecure, plain HTTP"},
		{[]string{"--from", plain, "--tls-ca", ca}, "the listener answered without TLS: give --insecure"},
	} {
		_, _, err := queryRun(append([]string{"query", "-w", "-"}, tc.args...)...)
		if exitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%q: %v, want %q", tc.args, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "http://" + addr, "--insecure"}, "the query listener speaks HTTPS"},
		{[]string{"--from", "ftp://" + addr}, "the query listener speaks HTTPS"},
		{[]string{"--from", "https://" + addr, "--insecure"}, "https:// and --insecure exclude each other"},
		{[]string{"--from", "https://" + addr + "/query", "--tls-ca", ca}, "without a path"},
		{[]string{"--from", addr + "/x", "--insecure"}, "without a path"},
		{[]string{"--from", "https://user@" + addr, "--tls-ca", ca}, "without a path, query or user"},
		{[]string{"--from", "::1:" + port, "--insecure"}, "an IPv6 address in brackets"},
		{[]string{"--from", "https://127.0.0.1", "--tls-ca", ca}, "want HOST:PORT"},
		{[]string{"--from", "127.0.0.1:0", "--insecure"}, "want a host and a port"},
		{[]string{"--from", ":" + port, "--insecure"}, "want a host and a port"},
		{[]string{"--from", "127.0.0.1:http", "--insecure"}, "want a host and a port"},
	} {
		_, _, err := queryRun(append([]string{"query", "-w", "-"}, tc.args...)...)
		if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%q: %v (exit %d), want a usage error with %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}
