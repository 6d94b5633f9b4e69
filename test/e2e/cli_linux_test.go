//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestTcpdumpShortFlags captures live with tcpdump's short flags: -i the
// interface, -s the snaplen, -p no promiscuous mode, -B the ring in KiB,
// -v debug logging, and the filter as trailing words. Every selected
// datagram arrives once, cut to 96 bytes with its original length kept;
// the other stream is filtered out.
func TestTcpdumpShortFlags(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const (
		port, otherPort = 5555, 6666
		count, snap     = 250, 96
	)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, otherPort))
	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startProc(t, ctx, "agent", vn.A, "agent", "--collector", addr, "--name", "short",
		"-i", "vA", "-s", fmt.Sprint(snap), "-p", "-B", "2048", "-v", "udp", "and", "dst", "port", fmt.Sprint(port))
	coll.waitSessions(1, 15*time.Second)
	for i, p := range []int{port, otherPort} {
		g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, p),
			"--count", fmt.Sprint(count), "--rate", "2000", "--stream", fmt.Sprint(i+1))
		if code := g.wait(20 * time.Second); code != 0 {
			t.Fatalf("gen udp exited %d", code)
		}
	}
	agent.stop(20 * time.Second)
	coll.stop(20 * time.Second)
	if !strings.Contains(agent.stderr.String(), "level=DEBUG") {
		t.Errorf("-v: the agent logged nothing at debug level")
	}
	r := checkAgentDir(t, filepath.Join(dir, "short"))
	r.expectExactlyOnce(t, "short", map[uint32]uint64{1: count})
	// gen udp's frames are 60, 142, 554, 1042 and 1514 bytes in turn:
	// all but the first are longer than the snaplen.
	if want := count * 4 / 5; r.Cut != want {
		t.Errorf("%d packets cut by -s %d, want %d", r.Cut, snap, want)
	}
	for k, l := range r.Lens {
		if l > snap {
			t.Errorf("stream %d seq %d: %d bytes captured, over -s %d", k.stream, k.seq, l, snap)
		}
	}
}
