//go:build cgo

package agent

import (
	"encoding/binary"
	"net/netip"
	"path/filepath"
	"testing"

	"golang.org/x/net/bpf"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/gen"
)

// frame is an Ethernet frame to or from addr (its destination when to),
// carrying an empty TCP or UDP segment; frag makes it an IPv4 fragment
// after the first, or an IPv6 packet with a fragment header.
func frame(proto byte, other, addr netip.AddrPort, to, frag bool) []byte {
	src, dst := other, addr
	if !to {
		src, dst = addr, other
	}
	var l4 []byte
	if proto == 6 {
		l4 = make([]byte, 20)
		l4[12] = 5 << 4
	} else {
		l4 = make([]byte, 8)
		binary.BigEndian.PutUint16(l4[4:], 8)
	}
	binary.BigEndian.PutUint16(l4[0:], src.Port())
	binary.BigEndian.PutUint16(l4[2:], dst.Port())
	eth := make([]byte, 14)
	eth[0], eth[6] = 2, 2
	if addr.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		if frag {
			binary.BigEndian.PutUint16(ip[6:], 185) // offset 1480 bytes: no ports here
			l4 = []byte("payload of a fragment after the first")
		}
		s4, d4 := src.Addr().As4(), dst.Addr().As4()
		copy(ip[12:], s4[:])
		copy(ip[16:], d4[:])
		return append(append(eth, ip...), l4...)
	}
	binary.BigEndian.PutUint16(eth[12:], 0x86dd)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, proto, 64
	if frag {
		ip[6] = 44
		l4 = append([]byte{proto, 0, 0x05, 0xc8, 0, 0, 0, 1}, []byte("fragment")...)
	}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	s6, d6 := src.Addr().As16(), dst.Addr().As16()
	copy(ip[8:], s6[:])
	copy(ip[24:], d6[:])
	return append(append(eth, ip...), l4...)
}

// TestOwnTrafficFilter compiles the capture filter a live agent runs
// (its own traffic excluded, after a user filter) and runs it over
// frames to and from each collector and others: the agent's traffic to
// every collector of the list is left out, over TCP and UDP, and
// nothing else is.
func TestOwnTrafficFilter(t *testing.T) {
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 1, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort
	a4, b4, c6 := ap("192.0.2.1:7733"), ap("192.0.2.2:9000"), ap("[2001:db8::3]:7733")
	peer4, peer6 := ap("192.0.2.99:40000"), ap("[2001:db8::99]:40000")
	tests := []struct {
		name      string
		transport string
		colls     []netip.AddrPort
		want      string // the filter, when pinned
		kept      map[string][]byte
		excluded  map[string][]byte
	}{
		{name: "tcp, one collector: the clause as ever", transport: TransportTCP, colls: []netip.AddrPort{a4},
			want:     "not (tcp and host 192.0.2.1 and port 7733)",
			excluded: map[string][]byte{"to a": frame(6, peer4, a4, true, false), "from a": frame(6, peer4, a4, false, false)},
			kept:     map[string][]byte{"udp to a": frame(17, peer4, a4, true, false), "to a's host, other port": frame(6, peer4, ap("192.0.2.1:80"), true, false)}},
		{name: "tcp, three collectors", transport: TransportTCP, colls: []netip.AddrPort{a4, b4, c6},
			excluded: map[string][]byte{
				"to a": frame(6, peer4, a4, true, false), "from b": frame(6, peer4, b4, false, false),
				"to c": frame(6, peer6, c6, true, false), "from c": frame(6, peer6, c6, false, false)},
			kept: map[string][]byte{
				"a's port at b":   frame(6, peer4, ap("192.0.2.2:7733"), true, false),
				"b's port at a":   frame(6, peer4, ap("192.0.2.1:9000"), true, false),
				"udp to b":        frame(17, peer4, b4, true, false),
				"another host":    frame(6, peer4, ap("192.0.2.50:7733"), true, false),
				"c's port, other": frame(6, peer6, ap("[2001:db8::4]:7733"), true, false)}},
		{name: "udp, one collector: the clause as ever", transport: TransportUDP, colls: []netip.AddrPort{a4},
			want:     "not (udp and host 192.0.2.1 and (port 7733 or ip[6:2] & 0x1fff != 0))",
			excluded: map[string][]byte{"to a": frame(17, peer4, a4, true, false), "fragment to a": frame(17, peer4, a4, true, true)},
			kept:     map[string][]byte{"tcp to a": frame(6, peer4, a4, true, false)}},
		{name: "udp, three collectors", transport: TransportUDP, colls: []netip.AddrPort{a4, b4, c6},
			excluded: map[string][]byte{
				"to a": frame(17, peer4, a4, true, false), "from b": frame(17, peer4, b4, false, false),
				"fragment to b": frame(17, peer4, b4, true, true), "to c": frame(17, peer6, c6, true, false),
				"fragment from c": frame(17, peer6, c6, false, true)},
			kept: map[string][]byte{
				"tcp to b":      frame(6, peer4, b4, true, false),
				"b's port at a": frame(17, peer4, ap("192.0.2.1:9000"), true, false),
				"another host":  frame(17, peer6, ap("[2001:db8::4]:7733"), true, false)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addrs []string
			for _, c := range tt.colls {
				addrs = append(addrs, c.String())
			}
			a, err := New(Config{Collectors: addrs, Name: "f", ReadFile: path, Insecure: true, Transport: tt.transport, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			expr := a.tr.ownTraffic()
			if tt.want != "" && expr != tt.want {
				t.Errorf("filter %q, want %q", expr, tt.want)
			}
			// As openLive combines them, after a user filter that keeps all
			// of these frames.
			expr = "(ip or ip6) and " + expr
			raw, err := capture.CompileFilter(capture.LinkTypeEthernet, 0, expr)
			if err != nil {
				t.Fatalf("compiling %q: %v", expr, err)
			}
			prog, ok := bpf.Disassemble(raw)
			if !ok {
				t.Fatalf("%q: a program the BPF VM cannot run", expr)
			}
			vm, err := bpf.NewVM(prog)
			if err != nil {
				t.Fatal(err)
			}
			run := func(what string, f []byte, keep bool) {
				n, err := vm.Run(f)
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if (n > 0) != keep {
					t.Errorf("%s: kept %v, want %v (filter %s)", what, n > 0, keep, expr)
				}
			}
			for what, f := range tt.excluded {
				run(what, f, false)
			}
			for what, f := range tt.kept {
				run(what, f, true)
			}
		})
	}
}
