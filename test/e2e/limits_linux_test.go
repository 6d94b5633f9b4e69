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

// TestRateLimitCounted: an agent limited to 1000 packets/s sees 3000
// packets offered at 4000/s. Every packet is accounted for: what the
// limit let through is in the file exactly once, the rest is counted as
// dropped by the rate limit, and the two add up to what was read.
func TestRateLimitCounted(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const port, count = 5555, 3000
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startProc(t, ctx, "agent limited", vn.A, "agent", "--collector", addr, "--name", "limited",
		"--iface", "vA", "--max-rate", "1000", "--filter", fmt.Sprintf("udp and dst port %d", port))
	coll.waitSessions(1, 15*time.Second)
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", "4000")
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("generator exited with %d", code)
	}
	agent.stop(20 * time.Second)
	coll.stop(20 * time.Second)

	s := agent.summary()
	if s.Read != count || s.Acked+s.RateDrops != s.Read || s.Dropped != 0 || s.KernelDrops != 0 {
		t.Fatalf("summary %+v: want %d read = acknowledged + rate-limited", s, count)
	}
	// 0.75 s at 1000/s plus a 100-packet burst, with slack for timing.
	if s.Acked < 600 || s.Acked > 1100 {
		t.Fatalf("%d packets passed a 1000/s limit over ~0.75 s", s.Acked)
	}
	r := checkAgentDir(t, filepath.Join(dir, "limited"))
	dups := 0
	for _, n := range r.Counts {
		if n != 1 {
			dups++
		}
	}
	if dups != 0 || uint64(len(r.Counts)) != s.Acked || uint64(r.Packets) != s.Acked {
		t.Fatalf("file holds %d packets, %d distinct, %d duplicated; agent acknowledged %d", r.Packets, len(r.Counts), dups, s.Acked)
	}
	t.Logf("read %d, written %d, dropped by the rate limit %d", s.Read, s.Acked, s.RateDrops)
}
