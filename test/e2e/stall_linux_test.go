//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestLiveAgentRidesOutStall: the default capture ring must hold a stall
// of the agent of 1 s at the design rate, 20 000 packets/s of 600-byte
// frames. A generator in namespace B sends 3 s of them; 1 s in, the
// agent is stopped (SIGSTOP) for 1 s and continued. The kernel must drop
// nothing, and every packet must be in the files exactly once.
func TestLiveAgentRidesOutStall(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const (
		port  = 5555
		rate  = 20000
		count = 3 * rate
		size  = 600
		stall = time.Second
	)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startProc(t, ctx, "agent stall", vn.A, "agent", "--collector", addr, "--name", "stall",
		"--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", port), "--metrics", freeport.Addr(t))
	coll.waitSessions(1, 15*time.Second)

	gen := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", fmt.Sprint(rate), "--size", fmt.Sprint(size))
	// The stall's schedule: a third into the stream, for stall.
	agent.waitMetric(10*time.Second, count/3, "pcapsync_agent_captured_packets_total", "interface=vA")
	agent.signal(syscall.SIGSTOP)
	time.Sleep(stall) // the stall itself, the subject
	agent.signal(syscall.SIGCONT)
	if code := gen.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen exited with code %d", code)
	}
	if want := fmt.Sprintf("sent %d datagrams", count); !strings.Contains(gen.stdout.String(), want) {
		t.Fatalf("gen: stdout %q, want %q", gen.stdout.String(), want)
	}

	agent.stop(20 * time.Second)
	s := agent.summary()
	if s.KernelDrops != 0 || s.Read != count || s.Acked != count || s.Dropped != 0 {
		t.Errorf("agent summary %+v: want %d read and acknowledged, nothing dropped by the kernel or the agent", s, count)
	}
	coll.stop(20 * time.Second)
	r := checkAgentDir(t, filepath.Join(dir, "stall"))
	r.expectExactlyOnce(t, "stall", map[uint32]uint64{1: count})
}
