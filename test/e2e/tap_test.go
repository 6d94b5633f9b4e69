//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"

	"github.com/pcapsync/pcapsync/internal/gen"
)

// tapClient is a program reading a tap stream into a file.
type tapClient struct {
	name string
	cmd  *exec.Cmd
	out  string // the pcapng file it writes
	logs testutil.Buffer
	done chan error
}

// startTapClient runs a shell pipeline (bash -c) that must write out.
func startTapClient(t *testing.T, ctx context.Context, name, out, script string) *tapClient {
	t.Helper()
	c := &tapClient{name: name, out: out, done: make(chan error, 1)}
	c.cmd = exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", script)
	c.cmd.Stdout, c.cmd.Stderr = &c.logs, &c.logs
	c.cmd.WaitDelay = 5 * time.Second
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		c.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("%s: %s\n%s", name, script, c.logs.String())
		}
	})
	return c
}

// wait waits for the client to end after the collector closed its stream.
func (c *tapClient) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("%s did not end within 20s of the collector's exit", c.name)
	}
}

// tapKeys reads a tap client's file: the generated packets in order,
// and the interface names seen.
func tapKeys(t *testing.T, path string) ([]key, map[string]int) {
	t.Helper()
	pkts, ifaces := readAll(t, path)
	names := map[string]int{}
	var keys []key
	for i, p := range pkts {
		names[ifaces[p.Interface].Name]++
		stream, seq, ok, err := gen.Parse(p.Data, ifaces[p.Interface].LinkType)
		if err != nil || !ok {
			t.Errorf("%s: packet %d is not a generated one (%v)", path, i+1, err)
			continue
		}
		keys = append(keys, key{stream, seq})
	}
	return keys, names
}

// expectInOrder requires that keys hold, for each stream s of want,
// sequence numbers 0..want[s]-1 once each, in order, and nothing else.
func expectInOrder(t *testing.T, what string, keys []key, want map[uint32]uint64) {
	t.Helper()
	next := map[uint32]uint64{}
	bad := 0
	for i, k := range keys {
		n, ok := want[k.stream]
		if !ok || k.seq != next[k.stream] || k.seq >= n {
			if bad++; bad <= 3 {
				t.Errorf("%s: packet %d is stream %d seq %d, want %v next", what, i+1, k.stream, k.seq, next)
			}
			continue
		}
		next[k.stream]++
	}
	for s, n := range want {
		if next[s] != n {
			t.Errorf("%s: %d packets of stream %d in order, want %d", what, next[s], s, n)
		}
	}
}

// TestTap: two agents stream to a collector with two taps. Wireshark's
// TCP@ input (tshark -i TCP@, which sends nothing: the tap's default
// selection), `nc | tshark -r -` and `pcapsync tail` (request lines)
// see every packet of the agent they selected, in order, and nothing
// of the other; `nc | tcpdump -r -` asking for every agent sees both,
// each in order (an interface block for the second agent mid-stream);
// a client that never reads is cut off, and the files stay complete.
func TestTap(t *testing.T) {
	requireTools(t, append(checkTools, "nc", "tcpdump", "bash")...)
	ctx := testContext(t)
	const count = 6000 // IMIX: about 2.5 MB per agent
	tmp := t.TempDir()
	agents := []struct {
		name   string
		stream uint32
	}{{"a1", 71}, {"a2", 72}}
	inputs := make([]*pacedInput, len(agents))
	for i, a := range agents {
		src := filepath.Join(tmp, a.name+".pcap")
		writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: a.stream, Seed: uint64(a.stream)})
		inputs[i] = startPacedInput(t, ctx, src, filepath.Join(tmp, a.name+".fifo"), 2*time.Second)
	}
	dir := t.TempDir()
	addr := freeport.Addr(t)
	tapDefault := freeport.Addr(t) // default selection: a1
	tapAny := freeport.Addr(t)     // no default: every agent
	coll := startCollector(t, ctx, "", addr, dir, "--tap", tapDefault+"=a1", "--tap", tapAny, "--tap-queue", "1M")

	out := func(name string) string { return filepath.Join(tmp, name+".pcapng") }
	clients := []*tapClient{
		startTapClient(t, ctx, "tshark -i TCP@", out("tshark-tcp"),
			fmt.Sprintf("tshark -q -i TCP@%s -w %s", tapDefault, out("tshark-tcp"))),
		startTapClient(t, ctx, "nc | tshark -r -", out("nc-tshark"),
			fmt.Sprintf("printf 'PCAPSYNC-TAP/1 agent=a1\\n' | nc %s %s | tshark -r - -w %s",
				strings.Split(tapAny, ":")[0], strings.Split(tapAny, ":")[1], out("nc-tshark"))),
		startTapClient(t, ctx, "pcapsync tail", out("tail"),
			fmt.Sprintf("%s tail --tap %s --insecure --agent a2 --filter 'udp and not tcp' > %s", pcapsyncBin, tapAny, out("tail"))),
		startTapClient(t, ctx, "nc | tcpdump -r -", out("nc-tcpdump"),
			fmt.Sprintf("printf 'PCAPSYNC-TAP/1 agent=*\\n' | nc %s %s | tcpdump -r - -w %s",
				strings.Split(tapAny, ":")[0], strings.Split(tapAny, ":")[1], out("nc-tcpdump"))),
	}
	// The stalled client: a small receive window, and it never reads.
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	stalled, err := d.DialContext(ctx, "tcp", tapAny)
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	if _, err := io.WriteString(stalled, "PCAPSYNC-TAP/1 agent=*\n"); err != nil {
		t.Fatal(err)
	}
	coll.waitMetric(20*time.Second, float64(len(clients)+1), "pcapsync_tap_clients_total")

	procs := make([]*proc, len(agents))
	for i, a := range agents {
		// 64 KiB batches keep coming at the replay's pace, as with live capture.
		procs[i] = startReplay(t, ctx, addr, a.name, inputs[i].path, "--batch-size", "64K")
	}
	for i := range agents {
		inputs[i].finish(t)
		finishReplay(t, procs[i], count, 30*time.Second)
	}
	coll.waitMetric(15*time.Second, 1, "pcapsync_tap_clients_dropped_total")
	stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, stalled); err != nil && os.IsTimeout(err) {
		t.Errorf("the stalled client's connection is still open after it was dropped")
	}
	coll.stop(20 * time.Second)
	for _, c := range clients {
		c.wait(t)
	}
	if ts := coll.collectorSummary().Tap; ts == nil || ts.DroppedSlow != 1 {
		t.Errorf("collector summary's tap part %+v: want one client dropped as too slow", ts)
	}

	a1 := map[uint32]uint64{71: count}
	a2 := map[uint32]uint64{72: count}
	both := map[uint32]uint64{71: count, 72: count}
	for _, tc := range []struct {
		client *tapClient
		want   map[uint32]uint64
		ifaces []string
	}{
		{clients[0], a1, []string{"a1:"}},
		{clients[1], a1, []string{"a1:"}},
		{clients[2], a2, []string{"a2:"}},
		{clients[3], both, nil}, // tcpdump writes pcap: no interface names
	} {
		keys, names := tapKeys(t, tc.client.out)
		expectInOrder(t, tc.client.name, keys, tc.want)
		for name := range names {
			if len(tc.ifaces) > 0 && !strings.HasPrefix(name, tc.ifaces[0]) {
				t.Errorf("%s: packets of interface %q, want only %s*", tc.client.name, name, tc.ifaces[0])
			}
		}
	}
	// The files are complete, the stalled client notwithstanding.
	for _, a := range agents {
		r := checkAgentDir(t, filepath.Join(dir, a.name))
		r.expectExactlyOnce(t, a.name, map[uint32]uint64{a.stream: count})
	}
}

// TestTapAuth: a tap of a collector with mutual TLS and a token. On a
// non-loopback address (0.0.0.0, reached here through 127.0.0.1) it
// takes TLS clients with a certificate and the token only; on loopback
// plain clients too, with the token. Everyone else is refused with the
// reason and counted.
func TestTapAuth(t *testing.T) {
	requireTools(t, append(checkTools, "nc", "bash")...)
	ctx := testContext(t)
	work := t.TempDir()
	certs := filepath.Join(work, "certs")
	gc := startProc(t, ctx, "gen certs", "", "gen", "certs", "--dir", certs, "--collector", "127.0.0.1,localhost", "--agents", "ta1,viewer")
	if code := gc.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen certs exited %d", code)
	}
	token := filepath.Join(work, "token")
	if err := os.WriteFile(token, []byte("e2e-tap-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const count = 2000
	in := filepath.Join(work, "in.pcap")
	writeGenFile(t, in, genConfig(count, 73))
	pem := func(name string) string { return filepath.Join(certs, name+".pem") }
	tlsFlags := func(cert string) string {
		f := "--tls-ca " + pem("ca")
		if cert != "" {
			f += " --tls-cert " + pem("agent-"+cert) + " --tls-key " + pem("agent-"+cert+"-key")
		}
		return f
	}

	dir := filepath.Join(work, "out")
	addr := freeport.Addr(t)
	loPort, anyPort := freeport.Port(t), freeport.Port(t)
	lo := fmt.Sprintf("127.0.0.1:%d", loPort)
	coll := startCollector(t, ctx, "", addr, dir, "--tls-cert", pem("collector"), "--tls-key", pem("collector-key"),
		"--tls-client-ca", pem("ca"), "--token-file", token,
		"--tap", lo, "--tap", fmt.Sprintf("0.0.0.0:%d=ta1", anyPort))
	anyAddr := fmt.Sprintf("127.0.0.1:%d", anyPort)

	tail := func(target, flags string) string {
		// The old name of --tap, still accepted.
		return fmt.Sprintf("%s tail --collector-admin %s --agent ta1 %s", pcapsyncBin, target, flags)
	}
	good := []*tapClient{
		startTapClient(t, ctx, "tail TLS with certificate and token", filepath.Join(work, "tls.pcapng"),
			tail(anyAddr, tlsFlags("viewer")+" --tls-server-name 127.0.0.1 --token-file "+token)+" > "+filepath.Join(work, "tls.pcapng")),
		startTapClient(t, ctx, "tail plain on loopback with token", filepath.Join(work, "plain.pcapng"),
			tail(lo, "--insecure --token-file "+token)+" > "+filepath.Join(work, "plain.pcapng")),
	}
	coll.waitMetric(10*time.Second, float64(len(good)), "pcapsync_tap_clients_total")

	bad := []struct {
		name, script, says string
	}{
		{"plain at the TLS tap", tail(anyAddr, "--insecure --token-file "+token), "requires TLS"},
		{"no token", tail(lo, "--insecure"), "token required"},
		{"wrong token", tail(lo, "--insecure --token-file "+pem("ca")), "wrong token"},
		{"no client certificate", tail(anyAddr, tlsFlags("")+" --token-file "+token), "certificate"},
		{"Wireshark-like, sends nothing", fmt.Sprintf("nc 127.0.0.1 %d </dev/null", loPort), "token required"},
	}
	for _, b := range bad {
		out, err := exec.CommandContext(ctx, "bash", "-c", b.script).CombinedOutput()
		if b.name != "Wireshark-like, sends nothing" && err == nil {
			t.Errorf("%s: tail exited 0", b.name)
		}
		if !strings.Contains(string(out), b.says) {
			t.Errorf("%s: output lacks %q:\n%s", b.name, b.says, out)
		}
	}

	agent := startReplay(t, ctx, addr, "ta1", in, "--tls-ca", pem("ca"), "--tls-cert", pem("agent-ta1"),
		"--tls-key", pem("agent-ta1-key"), "--token-file", token)
	finishReplay(t, agent, count, 30*time.Second)
	coll.stop(20 * time.Second)
	for _, c := range good {
		c.wait(t)
		keys, _ := tapKeys(t, c.out)
		expectInOrder(t, c.name, keys, map[uint32]uint64{73: count})
	}
	if ts := coll.collectorSummary().Tap; ts == nil || ts.Rejected != uint64(len(bad)) {
		t.Errorf("collector summary's tap part %+v: want %d refused tap clients", ts, len(bad))
	}
}
