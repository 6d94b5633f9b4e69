//go:build linux

package netns

import (
	"fmt"
	"net/netip"
	"os"
	"testing"
)

// The routed chain's addresses: two /30 links, A's and C's ends routed
// through R.
var (
	ChainAddrA  = netip.MustParseAddr("198.18.1.1") // A's end of link A-R
	ChainAddrRA = netip.MustParseAddr("198.18.1.2") // R's end of link A-R
	ChainAddrRC = netip.MustParseAddr("198.18.2.1") // R's end of link R-C
	ChainAddrC  = netip.MustParseAddr("198.18.2.2") // C's end of link R-C
)

// Chain is three namespaces in a row, A and C routed through R:
//
//	A: a0 198.18.1.1/30 <--> r0 198.18.1.2/30 :R: r1 198.18.2.1/30 <--> c0 198.18.2.2/30 :C
//
// R forwards IPv4 between its links; A and C reach each other's /30
// through it and nothing else (no default route). Neighbours are
// static, IPv6 is off, as in NewPair. Both links have MTU (1500 if 0).
type Chain struct {
	A, R, C string // namespace names
	MTU     int
}

// NewChain creates the namespaces and links of a Chain named prefix-...;
// they are deleted in tb.Cleanup.
func NewChain(tb testing.TB, prefix string, mtu int) *Chain {
	tb.Helper()
	if mtu == 0 {
		mtu = 1500
	}
	n := seq.Add(1)
	name := func(s string) string { return fmt.Sprintf("%s-%d-%d-%s", prefix, os.Getpid(), n, s) }
	c := &Chain{A: name("a"), R: name("r"), C: name("c"), MTU: mtu}
	for _, ns := range []string{c.A, c.R, c.C} {
		addNamespace(tb, ns)
	}
	IP(tb, "netns", "exec", c.R, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")
	type end struct {
		ns, ifc, mac string
		addr         netip.Addr
	}
	link := func(x, y end) {
		m := fmt.Sprint(mtu)
		IP(tb, "-n", x.ns, "link", "add", x.ifc, "address", x.mac, "mtu", m, "type", "veth",
			"peer", "name", y.ifc, "address", y.mac, "mtu", m, "netns", y.ns)
		for _, e := range []struct{ me, peer end }{{x, y}, {y, x}} {
			IP(tb, "-n", e.me.ns, "addr", "add", e.me.addr.String()+"/30", "dev", e.me.ifc)
			IP(tb, "-n", e.me.ns, "neigh", "replace", e.peer.addr.String(), "lladdr", e.peer.mac, "dev", e.me.ifc, "nud", "permanent")
			IP(tb, "-n", e.me.ns, "link", "set", e.me.ifc, "up")
		}
	}
	link(end{c.A, "a0", "02:70:63:66:01:01", ChainAddrA}, end{c.R, "r0", "02:70:63:66:01:02", ChainAddrRA})
	link(end{c.R, "r1", "02:70:63:66:02:01", ChainAddrRC}, end{c.C, "c0", "02:70:63:66:02:02", ChainAddrC})
	IP(tb, "-n", c.A, "route", "add", "198.18.2.0/30", "via", ChainAddrRA.String())
	IP(tb, "-n", c.C, "route", "add", "198.18.1.0/30", "via", ChainAddrRC.String())
	return c
}
