//go:build linux

package e2e

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestLiveCapture captures on one end of a veth pair: collector and agent
// run in namespace A, the generator in namespace B sends a stream the
// filter selects and one it must exclude. After SIGTERM to the agent and
// then the collector, the output holds every selected datagram exactly
// once, byte for byte, on interface "live1:vA", and nothing else.
func TestLiveCapture(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const (
		wantPort  = 5555
		otherPort = 6666
		count     = 500
		other     = 200
	)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, wantPort))
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, otherPort))

	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir)
	agent := startProc(t, ctx, "agent live1", vn.A, "agent", "--collector", addr, "--name", "live1",
		"--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", wantPort))
	// The agent opens its capture before it connects: once connected it
	// sees every packet.
	coll.waitSessions(1, 15*time.Second)

	send := func(port, stream, n, rate int) *proc {
		return startProc(t, ctx, fmt.Sprintf("gen stream %d", stream), vn.B, "gen", "udp",
			"--to", fmt.Sprintf("%s:%d", vn.addrA, port), "--count", fmt.Sprint(n),
			"--rate", fmt.Sprint(rate), "--stream", fmt.Sprint(stream))
	}
	gens := []*proc{send(wantPort, 1, count, 2000), send(otherPort, 2, other, 800)}
	for i, g := range gens {
		if code := g.wait(20 * time.Second); code != 0 {
			t.Fatalf("%s exited with code %d", g.name, code)
		}
		want := fmt.Sprintf("sent %d datagrams", []int{count, other}[i])
		if !strings.Contains(g.stdout.String(), want) {
			t.Fatalf("%s: stdout %q, want %q", g.name, g.stdout.String(), want)
		}
	}

	agent.stop(20 * time.Second)
	s := agent.summary()
	if s.Read != count || s.Sent != count || s.Acked != count || s.Dropped != 0 || s.KernelDrops != 0 || s.Unacked != 0 {
		t.Errorf("agent summary %+v: want %d read, sent and acknowledged, nothing dropped or unacknowledged", s, count)
	}
	// The default ring keeps the default snaplen: declared whole, no
	// word of a cut.
	if log := agent.stderr.String(); !strings.Contains(log, "snaplen=262144") || strings.Contains(log, "asked=") {
		t.Errorf("agent log: want the capture at snaplen=262144 and no cut snaplen:\n%s", log)
	}
	coll.stop(20 * time.Second)

	if got := agentDirs(t, dir); !slices.Equal(got, []string{"live1"}) {
		t.Errorf("collector dir holds %q, want only [live1]", got)
	}
	r := checkAgentDir(t, filepath.Join(dir, "live1"))
	r.expectExactlyOnce(t, "live1", map[uint32]uint64{1: count})
	if r.Cut != 0 {
		t.Errorf("%d packets cut short (OrigLen > captured length); snaplen 262144 should keep 1514-byte frames whole", r.Cut)
	}
	// Sizes cycle through gen.UDPSizes, up to a full 1500-byte MTU.
	for k, l := range r.Lens {
		if want := 14 + 20 + 8 + gen.UDPSizes[k.seq%uint64(len(gen.UDPSizes))]; l != want {
			t.Errorf("stream %d seq %d: frame of %d bytes, want %d", k.stream, k.seq, l, want)
		}
	}
	if want := map[string]int{"live1:vA": r.Packets}; len(r.IfNames) != 1 || r.IfNames["live1:vA"] != r.Packets {
		t.Errorf("tshark frame.interface_name counts %v, want %v", r.IfNames, want)
	}
}
