//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestUDPLiveCapture captures everything on a veth end (no filter) and
// sends it over --transport udp across that same link, at its 1500-byte
// MTU: the agent in namespace B captures what the generator in B sends
// to a sink in A, where the collector runs. Full-size frames do not fit
// a datagram, so they travel in pieces over vB, where the agent
// captures: the own-stream filter must keep its datagrams out, or the
// file would hold them. It holds exactly the generated packets, and the
// collector counts no loss.
func TestUDPLiveCapture(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const count, stream = 600, 7
	sink := netip.AddrPortFrom(vn.addrA, 5555)
	udpSink(t, vn.A, sink)
	dir := t.TempDir()
	addr := netip.AddrPortFrom(vn.addrA, 7733).String()
	metrics := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir, "--listen-udp", addr, "--metrics", metrics)
	agent := startProc(t, ctx, "agent udplive", vn.B, "agent", "--collector", addr, "--name", "udplive",
		"--iface", "vB", "--transport", "udp")
	coll.waitSessions(1, 15*time.Second) // its capture is open by then
	gen := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", sink.String(), "--count", fmt.Sprint(count),
		"--rate", "2000", "--stream", fmt.Sprint(stream))
	if code := gen.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen exited with code %d", code)
	}
	// Every packet written (the last batch sealed by the agent's flush
	// interval) before the agent stops.
	waitMetric(t, newNetnsScraper(t, vn.A), metrics, 10*time.Second, count, "pcapsync_collector_packets_written_total", "agent=udplive")
	agent.stop(20 * time.Second)
	if s := agent.summary(); s.Read != count || s.Sent != count || s.Dropped != 0 || s.KernelDrops != 0 || s.Unacked != 0 || s.Pieced == 0 {
		t.Errorf("agent summary %+v: want %d read and sent, nothing dropped, batches sent in pieces (full-size frames)", s, count)
	}
	waitNoPart(t, dir, 5*time.Second) // the goodbye closed the file
	coll.stop(20 * time.Second)
	if u := coll.collectorSummary().udpAgent(t, "udplive"); u.Lost != 0 || u.Malformed != 0 {
		t.Errorf("collector's UDP counts %s: want no loss and nothing malformed", u)
	}
	r := checkAgentDir(t, filepath.Join(dir, "udplive"))
	r.expectExactlyOnce(t, "udplive", map[uint32]uint64{stream: count})
	if r.Cut != 0 {
		t.Errorf("%d packets cut short", r.Cut)
	}
}
