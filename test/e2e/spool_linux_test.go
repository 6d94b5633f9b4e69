//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestAgentRestartWithSpool: a live agent with a spool keeps what it
// captured while the collector was down, is killed (SIGKILL) before it
// could send it, and after both come back its next run delivers it.
//
//  1. stream 1 is delivered normally;
//  2. the collector is killed; stream 2 is captured and sealed, so it is
//     only in the agent's spool;
//  3. the agent is killed; collector and agent are restarted (same dir,
//     same spool); the agent resends stream 2 from its spool;
//  4. stream 3 is delivered; agent and collector stop cleanly.
//
// Every packet of the three streams must be in the files exactly once.
// Without the spool, stream 2 would be lost with the agent's memory.
func TestAgentRestartWithSpool(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const port, count = 5555, 600
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	dir, spool := t.TempDir(), filepath.Join(t.TempDir(), "spool")
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	metrics, scrape := fmt.Sprintf("127.0.0.1:%d", freePort(t)), newNetnsScraper(t, vn.A)

	startAgent := func(run int) *proc {
		return startProc(t, ctx, fmt.Sprintf("agent run %d", run), vn.A, "agent", "--collector", addr,
			"--name", "spooled", "--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", port),
			"--spool", spool, "--metrics", metrics)
	}
	send := func(stream int) {
		t.Helper()
		g := startProc(t, ctx, fmt.Sprintf("gen stream %d", stream), vn.B, "gen", "udp",
			"--to", fmt.Sprintf("%s:%d", vn.addrA, port), "--count", fmt.Sprint(count), "--rate", "3000",
			"--stream", fmt.Sprint(stream))
		if code := g.wait(20 * time.Second); code != 0 {
			t.Fatalf("generator of stream %d exited with %d", stream, code)
		}
	}

	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startAgent(1)
	agent.waitFor("connected to collector", 15*time.Second)
	send(1)
	waitMetric(t, scrape, metrics, 20*time.Second, count, "pcapsync_agent_acknowledged_packets_total")

	coll.signal(syscall.SIGKILL)
	coll.wait(10 * time.Second)
	send(2)
	waitMetric(t, scrape, metrics, 20*time.Second, 2*count, "pcapsync_agent_captured_packets_total", "interface=vA")
	// The last batch is sealed one flush interval (the default, 50ms)
	// after its first packet, by the agent's own timer; nothing outside
	// the agent shows it, so this waits four intervals.
	time.Sleep(4 * 50 * time.Millisecond)
	agent.signal(syscall.SIGKILL)
	agent.wait(10 * time.Second)

	coll = startCollector(t, ctx, vn.A, addr, dir)
	agent = startAgent(2)
	agent.waitFor("spool: resending batches of the previous run", 15*time.Second)
	agent.waitFor("connected to collector", 15*time.Second)
	send(3)
	agent.stop(20 * time.Second)
	coll.stop(20 * time.Second)

	r := checkAgentDir(t, filepath.Join(dir, "spooled"))
	r.expectExactlyOnce(t, "spooled", map[uint32]uint64{1: count, 2: count, 3: count})
}
