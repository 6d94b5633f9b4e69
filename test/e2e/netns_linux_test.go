//go:build linux

package e2e

import (
	"net"
	"net/netip"
	"testing"

	"github.com/pcapsync/pcapsync/internal/testutil/netns"
)

// vethNet is two network namespaces joined by a veth pair
// (internal/testutil/netns):
//
//	A: vA 198.18.0.1/30  <--veth-->  B: vB 198.18.0.2/30
type vethNet struct {
	A, B       string // namespace names
	addrA      netip.Addr
	addrB      netip.Addr
	macA, macB string
}

func newVethNet(t *testing.T) *vethNet {
	t.Helper()
	requireRoot(t)
	requireTools(t, "ip")
	p := netns.NewPair(t, netns.Config{Prefix: "pcse2e", IfA: "vA", IfB: "vB", MACA: "02:70:63:65:00:01", MACB: "02:70:63:65:00:02"})
	return &vethNet{A: p.A, B: p.B, addrA: netns.AddrA, addrB: netns.AddrB, macA: p.MACA, macB: p.MACB}
}

// udpSink listens on addr:port in namespace ns and discards what
// arrives, so that test traffic draws no ICMP port-unreachable replies
// (which would make the generator's connected socket fail with
// ECONNREFUSED). Closed in t.Cleanup.
func udpSink(t *testing.T, ns string, ap netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	err := netns.In(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
		return err
	})
	if err != nil {
		t.Fatalf("listening on udp %s in %s: %v", ap, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
}
