//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// detectWithin is how soon, with the default --heartbeat 2s and
// --peer-timeout 6s, a stopped peer must be noticed.
const detectWithin = 10 * time.Second

// deadPeerRig is a live agent and its collector in namespace A (over
// 127.0.0.1 there), capturing UDP the generator in B sends to port.
type deadPeerRig struct {
	t           *testing.T
	vn          *vethNet
	coll, agent *proc
	dir         string
	port        int
	metrics     string // the agent's metrics address
	scrape      *netnsScraper
}

func newDeadPeerRig(t *testing.T, name string) *deadPeerRig {
	t.Helper()
	requireTools(t, checkTools...)
	r := &deadPeerRig{t: t, vn: newVethNet(t), dir: t.TempDir(), port: 5555}
	r.metrics, r.scrape = freeport.Addr(t), newNetnsScraper(t, r.vn.A)
	ctx := testContext(t)
	udpSink(t, r.vn.A, netip.AddrPortFrom(r.vn.addrA, uint16(r.port)))
	addr := freeport.Addr(t)
	r.coll = startCollector(t, ctx, r.vn.A, addr, r.dir)
	r.agent = startProc(t, ctx, "agent "+name, r.vn.A, "agent", "--collector", addr, "--name", name,
		"--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", r.port), "--metrics", r.metrics)
	r.coll.waitSessions(1, 15*time.Second)
	return r
}

// send sends n datagrams of stream from B and waits for the generator.
func (r *deadPeerRig) send(stream, n int) {
	r.t.Helper()
	g := startProc(r.t, testContext(r.t), fmt.Sprintf("gen stream %d", stream), r.vn.B, "gen", "udp",
		"--to", fmt.Sprintf("%s:%d", r.vn.addrA, r.port), "--count", fmt.Sprint(n), "--rate", "2000", "--stream", fmt.Sprint(stream))
	if code := g.wait(20 * time.Second); code != 0 {
		r.t.Fatalf("%s exited with code %d", g.name, code)
	}
}

// waitAcked waits until the collector acknowledged n packets of the
// agent's, over all its connections.
func (r *deadPeerRig) waitAcked(n int) {
	r.t.Helper()
	waitMetric(r.t, r.scrape, r.metrics, 20*time.Second, float64(n), "pcapsync_agent_acknowledged_packets_total")
}

// finish stops agent and collector and checks that both streams
// arrived exactly once.
func (r *deadPeerRig) finish(name string, want map[uint32]uint64) collectorSummary {
	r.t.Helper()
	var total uint64
	for _, n := range want {
		total += n
	}
	r.agent.stop(30 * time.Second)
	if s := r.agent.summary(); s.Read != total || s.Acked != total || s.Unacked != 0 || s.Dropped != 0 || s.KernelDrops != 0 {
		r.t.Errorf("agent summary %+v: want %d read and acknowledged, nothing lost", s, total)
	}
	r.coll.stop(20 * time.Second)
	checkAgentDir(r.t, filepath.Join(r.dir, name)).expectExactlyOnce(r.t, name, want)
	return r.coll.collectorSummary()
}

// TestCollectorStopped freezes the collector (SIGSTOP): the agent must
// notice within detectWithin by the missing heartbeats, not after TCP's
// 15 minutes; after SIGCONT it reconnects and delivers what it captured
// meanwhile, nothing twice.
func TestCollectorStopped(t *testing.T) {
	r := newDeadPeerRig(t, "frozencoll")
	r.send(1, 300)
	r.waitAcked(300)

	r.coll.signal(syscall.SIGSTOP)
	stopped := time.Now()
	r.agent.waitMetricEq(detectWithin, 0, "pcapsync_agent_connected") // its session ended
	t.Logf("agent noticed the stopped collector after %v", time.Since(stopped).Round(10*time.Millisecond))
	r.send(2, 300) // captured and queued while the collector is away
	r.coll.signal(syscall.SIGCONT)
	resumed := time.Now()
	r.agent.waitMetric(20*time.Second, 1, "pcapsync_agent_reconnects_total")
	r.agent.waitMetric(20*time.Second, 1, "pcapsync_agent_connected")
	t.Logf("agent reconnected %v after SIGCONT", time.Since(resumed).Round(10*time.Millisecond))
	r.finish("frozencoll", map[uint32]uint64{1: 300, 2: 300})
}

// TestAgentStopped freezes the agent (SIGSTOP): the collector must end
// its session within detectWithin, saying so in its log; after SIGCONT
// the agent reconnects and delivers the rest.
func TestAgentStopped(t *testing.T) {
	r := newDeadPeerRig(t, "frozenagent")
	r.send(1, 300)
	r.waitAcked(300)

	r.agent.signal(syscall.SIGSTOP)
	stopped := time.Now()
	r.coll.waitMetric(detectWithin, 1, "pcapsync_collector_peer_timeouts_total")
	t.Logf("collector ended the stopped agent's session after %v", time.Since(stopped).Round(10*time.Millisecond))
	r.agent.signal(syscall.SIGCONT)
	r.coll.waitSessions(2, 20*time.Second)
	r.send(2, 300)
	r.waitAcked(600)
	if s := r.finish("frozenagent", map[uint32]uint64{1: 300, 2: 300}); s.PeerTimeouts != 1 {
		t.Errorf("collector summary %+v: want 1 peer timeout", s)
	}
}
