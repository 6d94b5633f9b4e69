package frontdoor

import (
	"net"
	"net/netip"
)

// ListenNetwork returns the network to listen on addr (HOST:PORT) with,
// for base "tcp" or "udp": the stack the host names, as a firewall rule
// for that address reads it.
//
//   - An IPv4 address, 0.0.0.0 included: base+"4", IPv4 only. (Go's own
//     "tcp" listens on both stacks for 0.0.0.0, so a rule for IPv4
//     alone would leave the port open over IPv6.)
//   - An IPv6 address, [::] included: base+"6", IPv6 only (IPV6_V6ONLY
//     on the wildcard).
//   - An empty host (":7733") or a host name: base, both stacks for the
//     empty host as before.
//
// An IPv4-mapped IPv6 address counts as IPv4.
func ListenNetwork(base, addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return base
	}
	ip, err := netip.ParseAddr(host)
	switch {
	case err != nil:
		return base
	case ip.Unmap().Is4():
		return base + "4"
	default:
		return base + "6"
	}
}

// ListenTCP listens on the TCP address addr on the stack its host names
// (ListenNetwork). An IPv4-mapped address listens as its IPv4 address.
func ListenTCP(addr string) (net.Listener, error) {
	return net.Listen(ListenNetwork("tcp", addr), unmapHost(addr))
}

// ListenUDP listens on the UDP address addr on the stack its host names
// (ListenNetwork).
func ListenUDP(addr string) (*net.UDPConn, error) {
	nw := ListenNetwork("udp", addr)
	ua, err := net.ResolveUDPAddr(nw, unmapHost(addr))
	if err != nil {
		return nil, err
	}
	return net.ListenUDP(nw, ua)
}

// unmapHost writes an IPv4-mapped IPv6 host of addr as IPv4, which the
// "tcp4" and "udp4" networks take.
func unmapHost(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Is4In6() {
		return net.JoinHostPort(ip.Unmap().String(), port)
	}
	return addr
}
