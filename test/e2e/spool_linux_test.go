//go:build linux

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
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
	const port, count = 5555, 600
	rig := newSpoolRig(t, "spooled", port)
	vn, ctx, dir, _, addr, metrics, scrape, startAgent := rig.vn, rig.ctx, rig.dir, rig.spool, rig.addr, rig.metrics, rig.scrape, rig.startAgent
	send := func(stream int) { sendStream(t, ctx, vn, port, count, stream) }

	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startAgent(1)
	coll.waitSessions(1, 15*time.Second)
	send(1)
	waitMetric(t, scrape, metrics, 20*time.Second, count, "pcapsync_agent_acknowledged_packets_total")

	coll.signal(syscall.SIGKILL)
	coll.wait(10 * time.Second)
	send(2)
	waitMetric(t, scrape, metrics, 20*time.Second, 2*count, "pcapsync_agent_captured_packets_total", "interface=vA")
	// Stream 2 is in the spool once all of it is sealed into batches
	// (the last one a flush interval after its first packet): the
	// collector is down, so they stay unacknowledged.
	waitMetric(t, scrape, metrics, 20*time.Second, count, "pcapsync_agent_unacknowledged_packets")
	agent.signal(syscall.SIGKILL)
	agent.wait(10 * time.Second)

	coll = startCollector(t, ctx, vn.A, addr, dir)
	agent = startAgent(2)
	coll.waitSessions(1, 15*time.Second)
	// Run 2 has captured nothing yet: it loaded stream 2 from the spool
	// (recovered, not counted as this run's acknowledged) and resends
	// it until nothing is left unacknowledged.
	testutil.Eventually(t, 20*time.Second, func() error {
		m := scrape.metrics(metrics)
		rec, un, acked := m.Value(t, "pcapsync_agent_recovered_packets_total"), m.Value(t, "pcapsync_agent_unacknowledged_packets"),
			m.Value(t, "pcapsync_agent_acknowledged_packets_total")
		if rec < count || un != 0 || acked != 0 {
			return fmt.Errorf("run 2: %v packets recovered from the spool, %v unacknowledged, %v of its own acknowledged; want at least %d, 0, 0", rec, un, acked, count)
		}
		return nil
	})
	send(3)
	agent.stop(20 * time.Second)
	coll.stop(20 * time.Second)

	r := checkAgentDir(t, filepath.Join(dir, "spooled"))
	r.expectExactlyOnce(t, "spooled", map[uint32]uint64{1: count, 2: count, 3: count})
}

// sendStream sends count datagrams of stream from B to A's port, at
// 3000 a second, and waits for the generator to finish.
func sendStream(t *testing.T, ctx context.Context, vn *vethNet, port, count, stream int) {
	t.Helper()
	g := startProc(t, ctx, fmt.Sprintf("gen stream %d", stream), vn.B, "gen", "udp",
		"--to", fmt.Sprintf("%s:%d", vn.addrA, port), "--count", fmt.Sprint(count), "--rate", "3000",
		"--stream", fmt.Sprint(stream))
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("generator of stream %d exited with %d", stream, code)
	}
}

// TestAgentCleanRestart: an agent with a spool that stops cleanly, with
// everything it sent acknowledged, and starts again on the same spool
// does not say it resends batches of the previous run: the newest
// segment the spool keeps (it carries the sequence on) holds only
// acknowledged batches, and nothing of them is sent again. What the
// second run captures is delivered; every packet is in the files
// exactly once.
func TestAgentCleanRestart(t *testing.T) {
	const port, count = 5557, 300
	rig := newSpoolRig(t, "clean", port)
	vn, ctx, dir, spool, addr, metrics, scrape, startAgent := rig.vn, rig.ctx, rig.dir, rig.spool, rig.addr, rig.metrics, rig.scrape, rig.startAgent

	coll := startCollector(t, ctx, vn.A, addr, dir)
	run1 := startAgent(1)
	coll.waitSessions(1, 15*time.Second)
	sendStream(t, ctx, vn, port, count, 1)
	waitMetric(t, scrape, metrics, 20*time.Second, count, "pcapsync_agent_acknowledged_packets_total")
	run1.stop(20 * time.Second)
	if s := run1.summary(); s.Unacked != 0 || s.Acked != count {
		t.Fatalf("run 1: acknowledged %d, unacknowledged %d; want %d, 0", s.Acked, s.Unacked, count)
	}
	if segs, _ := filepath.Glob(filepath.Join(spool, "seg-*")); len(segs) == 0 {
		t.Fatal("the spool kept no segment after the clean stop: the case this test is about is gone")
	}

	run2 := startAgent(2)
	coll.waitSessions(2, 15*time.Second)
	sendStream(t, ctx, vn, port, count, 2)
	waitMetric(t, scrape, metrics, 20*time.Second, count, "pcapsync_agent_captured_packets_total", "interface=vA")
	run2.stop(20 * time.Second) // waits for the acknowledgements
	coll.stop(20 * time.Second)
	// Acked is this run's packets; the batches it loaded from the spool
	// (the welcome acknowledged them) are Recovered.
	if s := run2.summary(); s.Read != count || s.Acked != count || s.Unacked != 0 || s.Recovered == 0 {
		t.Errorf("run 2: read %d, acknowledged %d, unacknowledged %d, recovered %d; want %d, %d, 0, some",
			s.Read, s.Acked, s.Unacked, s.Recovered, count, count)
	}
	if strings.Contains(run2.stderr.String(), "spool: resending batches of the previous run") {
		t.Errorf("run 2 after a clean stop says it resends:\n%s", run2.stderr.String())
	}
	r := checkAgentDir(t, filepath.Join(dir, "clean"))
	r.expectExactlyOnce(t, "clean", map[uint32]uint64{1: count, 2: count})
}

// TestAgentUpgradeUnderLoad: an agent with a spool restarted while
// packets flow, as a package upgrade restarts its unit (SIGTERM, then a
// new process on the same spool), loses nothing it captured: every
// packet either run read is in the files exactly once. The first run
// gets almost no time to wait for its last acknowledgements, so what
// it sent last is acknowledged only through the spool of the second.
// Packets that arrive while no agent runs are not captured by anyone:
// the kernel has no socket for them (not counted as read).
func TestAgentUpgradeUnderLoad(t *testing.T) {
	const port, count, rate = 5556, 12000, 3000
	rig := newSpoolRig(t, "upgraded", port, "--shutdown-timeout", "1ms")
	vn, ctx, dir, _, addr, metrics, scrape, startAgent := rig.vn, rig.ctx, rig.dir, rig.spool, rig.addr, rig.metrics, rig.scrape, rig.startAgent

	coll := startCollector(t, ctx, vn.A, addr, dir)
	run1 := startAgent(1)
	coll.waitSessions(1, 15*time.Second)
	gen := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", fmt.Sprint(rate), "--stream", "7")
	// A third of the stream through the first run, then the restart.
	waitMetric(t, scrape, metrics, 20*time.Second, count/3, "pcapsync_agent_acknowledged_packets_total")
	run1.stop(20 * time.Second)
	run2 := startAgent(2)
	coll.waitSessions(2, 15*time.Second)
	if code := gen.wait(30 * time.Second); code != 0 {
		t.Fatalf("generator exited with %d", code)
	}
	s1 := run1.summary()
	waitMetric(t, scrape, metrics, 20*time.Second, 1, "pcapsync_agent_captured_packets_total", "interface=vA")
	run2.stop(20 * time.Second)
	coll.stop(20 * time.Second)
	s2 := run2.summary()

	t.Logf("run 1: read %d, acknowledged %d, unacknowledged at exit %d; run 2: read %d, acknowledged %d", s1.Read, s1.Acked, s1.Unacked, s2.Read, s2.Acked)
	for i, s := range []agent.Summary{s1, s2} {
		if s.Dropped != 0 || s.KernelDrops != 0 {
			t.Errorf("run %d dropped %d packets (queue) and %d (kernel)", i+1, s.Dropped, s.KernelDrops)
		}
	}
	if s2.Unacked != 0 {
		t.Errorf("run 2 left %d packets unacknowledged", s2.Unacked)
	}
	if s1.Unacked > 0 && !strings.Contains(run2.stderr.String(), "spool: resending batches of the previous run") {
		t.Errorf("run 1 left %d packets unacknowledged, and run 2 did not resend from its spool", s1.Unacked)
	}
	r := checkAgentDir(t, filepath.Join(dir, "upgraded"))
	var in, dup int
	for k, c := range r.Counts {
		if k.stream != 7 || k.seq >= count {
			t.Errorf("packet %+v was not sent", k)
		}
		in++
		if c > 1 {
			dup++
		}
	}
	if dup > 0 {
		t.Errorf("%d packets are in the files more than once", dup)
	}
	if want := s1.Read + s2.Read; uint64(in) != want {
		t.Errorf("%d distinct packets in the files, the two runs read %d + %d = %d", in, s1.Read, s2.Read, want)
	}
	if s1.Read == 0 || s2.Read == 0 {
		t.Errorf("a run read nothing (%d, %d): the restart was not under load", s1.Read, s2.Read)
	}
}

// spoolRig is what the spool tests share: a veth network with a UDP
// sink on port, an output root, a spool, the collector's and the
// agent's metrics addresses, and startAgent, which starts run N of
// agent name capturing port with that spool (and extra flags).
type spoolRig struct {
	vn                        *vethNet
	ctx                       context.Context
	dir, spool, addr, metrics string
	scrape                    *netnsScraper
	startAgent                func(run int) *proc
}

func newSpoolRig(t *testing.T, name string, port int, extra ...string) *spoolRig {
	t.Helper()
	requireTools(t, checkTools...)
	r := &spoolRig{vn: newVethNet(t), ctx: testContext(t)}
	udpSink(t, r.vn.A, netip.AddrPortFrom(r.vn.addrA, uint16(port)))
	r.dir, r.spool = t.TempDir(), filepath.Join(t.TempDir(), "spool")
	r.addr, r.metrics = freeport.Addr(t), freeport.Addr(t)
	r.scrape = newNetnsScraper(t, r.vn.A)
	r.startAgent = func(run int) *proc {
		return startProc(t, r.ctx, fmt.Sprintf("agent run %d", run), r.vn.A, append([]string{"agent", "--collector", r.addr,
			"--name", name, "--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", port),
			"--spool", r.spool, "--metrics", r.metrics}, extra...)...)
	}
	return r
}
