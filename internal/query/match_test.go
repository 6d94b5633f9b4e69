package query

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/filter"
	"github.com/pcapsync/pcapsync/internal/index"
)

func TestFilterTerms(t *testing.T) {
	for _, c := range []struct{ filter, want string }{
		{"", "?"},
		{"host 10.1.2.3", "host(10.1.2.3,arp)"},
		{"ip host 10.1.2.3", "host(10.1.2.3)"},
		{"src host 10.1.2.3", "host(10.1.2.3,arp)"},
		{"ip dst host 10.1.2.3", "host(10.1.2.3)"},
		{"host 2001:db8::1", "host(2001:db8::1)"},
		{"ip6 src host fe80::1", "host(fe80::1)"},
		{"host fe80::1%eth0", "?"},
		{"host ::ffff:10.1.2.3", "?"}, // the index keys it as IPv4
		{"host web1", "?"},            // a name, resolved by libpcap
		{"port 53", "port(53)"},
		{"dst port 443", "port(443)"},
		{"tcp port 80", "and(proto(6) port(80))"},
		{"udp src port 53", "and(proto(17) port(53))"},
		{"port domain", "?"},
		// Numbers as libpcap reads them: a leading 0 octal, 0x hex.
		{"port 053", "port(43)"},
		{"port 0x35", "port(53)"},
		{"port 0X35", "port(53)"},
		{"port 0", "port(0)"},
		{"udp port 0177777", "and(proto(17) port(65535))"},
		{"port 0200000", "?"},
		{"port 0x", "?"},
		{"ip proto 021", "proto(17)"},
		{"ip proto 0x11", "proto(17)"},
		{"tcp", "proto(6)"},
		{"udp", "proto(17)"},
		{"icmp", "proto(1)"},
		{"ip proto 47", "proto(47)"},
		{"ip proto \\tcp", "proto(6)"},
		{"ip6 proto 0", "proto(0)"}, // ip6[6], keyed whatever it is
		{"port 053", "port(43)"},    // octal, as libpcap reads it
		{"port 0x35", "port(53)"},
		{"port 0", "port(0)"},
		{"port 08", "?"}, // libpcap: not an octal digit
		{"port 65536", "?"},
		{"ip6 proto 054", "proto(44)"},
		{"ip proto 0x11", "proto(17)"},
		{"ip proto 300", "?"},
		{"ip6 proto 17", "proto(17)"},
		{"proto 6", "?"},
		{"host 10.0.0.1 and port 80", "and(host(10.0.0.1,arp) port(80))"},
		{"host 10.0.0.1 && tcp && port 80", "and(host(10.0.0.1,arp) proto(6) port(80))"},
		{"host 10.0.0.1 or port 80", "or(host(10.0.0.1,arp) port(80))"},
		// and, or: equal precedence, left to right.
		{"port 1 or port 2 and port 3", "and(or(port(1) port(2)) port(3))"},
		{"port 1 and port 2 or port 3", "or(and(port(1) port(2)) port(3))"},
		{"port 1 or (port 2 and port 3)", "or(port(1) and(port(2) port(3)))"},
		{"(tcp or udp) and (port 53)", "and(or(proto(6) proto(17)) port(53))"},
		// What the index cannot answer.
		{"not host 10.0.0.1", "?"},
		{"! tcp", "?"},
		{"port 53 and not host 10.0.0.1", "port(53)"},
		{"host 10.0.0.1 or net 10.2.0.0/16", "?"},
		{"host 10.0.0.1 and net 10.2.0.0/16", "host(10.0.0.1,arp)"},
		{"tcp and portrange 1-100", "proto(6)"},
		{"tcp[13] & 2 != 0 and port 80", "port(80)"},
		{"(tcp[13] & 2) != 0 and port 80", "port(80)"},
		{"len > 100 or port 80", "?"},
		{"ether host 00:11:22:33:44:55 and udp", "proto(17)"},
		{"vlan and host 10.0.0.1", "?"},
		{"mpls and port 80", "?"},
		{"arp", "?"},
		{"ip", "?"},
		{"host 10.0.0.1 or 10.0.0.2", "?"}, // the inherited qualifier is not followed
		{"src or dst host 10.0.0.1", "?"},
		{"(port 1", "?"},
		{"port 1)", "?"},
	} {
		got := filterTerms(c.filter).simplify(false).String()
		if got != c.want {
			t.Errorf("%q: %s, want %s", c.filter, got, c.want)
		}
	}
}

// TestIndexMatchARP: an unqualified IPv4 host term is asked of the
// index only for files whose link types carry no ARP; an or with it is
// then dropped whole, an and keeps its other terms.
func TestIndexMatchARP(t *testing.T) {
	for _, c := range []struct {
		filter  string
		arp     bool
		wantNil bool
	}{
		{"host 10.0.0.1", false, false},
		{"host 10.0.0.1", true, true},
		{"ip host 10.0.0.1", true, false},
		{"host 10.0.0.1 and port 53", true, false},
		{"host 10.0.0.1 or port 53", true, true},
		{"host fe80::1", true, false},
	} {
		if m := filterTerms(c.filter).indexMatch(c.arp); (m == nil) != c.wantNil {
			t.Errorf("%q arp %v: match %v, want nil %v", c.filter, c.arp, m, c.wantNil)
		}
	}
}

// TestMatchNoFalseNegatives: for random packets and random filters, a
// packet libpcap's program accepts is in a block the derived Match
// selects.
func TestMatchNoFalseNegatives(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 1))
	const npkts = 300
	pkts := make([][]byte, npkts)
	for i := range pkts {
		pkts[i] = randPacket(rng)
	}
	// One block per packet.
	var b index.Builder
	b.Reset("x.pcapng", index.CodecNone, 1, 1, 0, 0)
	for i, p := range pkts {
		b.Add(1, int64(i), p)
		b.EndBlock(int64(i+1), 1, int64(i+1))
	}
	b.Finish(npkts, 1, npkts, npkts)
	ix, err := index.Parse(b.Pending(), false)
	if err != nil || len(ix.All) != npkts {
		t.Fatalf("index: %v, %d blocks", err, len(ix.All))
	}
	filters, checked := 0, 0
	for range 400 {
		f := randFilter(rng, 3)
		flt, err := filter.New(f)
		if err != nil {
			continue // libpcap rejects some combinations (ip6 host with IPv4 ...)
		}
		filters++
		// Ethernet carries ARP: an index of version 1 is asked the
		// match that leaves out IPv4 host terms; one of version 2, which
		// keys ARP's addresses, the match with them.
		v1, v2 := filterTerms(f).indexMatch(true), filterTerms(f).indexMatch(false)
		for i, p := range pkts {
			ok, err := flt.Match(1, p, uint32(len(p)))
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				checked++
				if !ix.MayMatch(i, v1) || !ix.MayMatch(i, v2) {
					t.Fatalf("filter %q (terms %s) accepts packet %d (% x), its block is not selected (version 1 match %v, version 2 %v)",
						f, filterTerms(f), i, p[:min(len(p), 64)], ix.MayMatch(i, v1), ix.MayMatch(i, v2))
				}
			}
		}
	}
	t.Logf("%d filters, %d accepted packets checked", filters, checked)
	if filters < 200 || checked < 1000 {
		t.Fatalf("too few cases: %d filters, %d packets accepted", filters, checked)
	}
}

var (
	testV4 = []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}
	testV6 = []string{"fe80::1", "fe80::2"}
	testPt = []uint16{53, 80, 443}
)

// randPacket is an Ethernet frame: IPv4 or IPv6 (TCP, UDP, ICMP, some
// with IPv6 extension headers or as fragments), ARP, or IPv4 in a VLAN.
func randPacket(rng *rand.Rand) []byte {
	be := binary.BigEndian
	eth := func(et uint16) []byte {
		b := make([]byte, 14, 128)
		b[0], b[6] = 2, 2
		be.PutUint16(b[12:], et)
		return b
	}
	l4 := func(proto uint8) []byte {
		switch proto {
		case 6, 17:
			h := make([]byte, 20)
			be.PutUint16(h, testPt[rng.IntN(3)]+uint16(rng.IntN(2)))
			be.PutUint16(h[2:], testPt[rng.IntN(3)])
			return h
		}
		return make([]byte, 8)
	}
	v4 := func() []byte { return netip.MustParseAddr(testV4[rng.IntN(3)]).AsSlice() }
	v6 := func() []byte { return netip.MustParseAddr(testV6[rng.IntN(2)]).AsSlice() }
	protos := []uint8{6, 17, 1, 58, 47}
	switch rng.IntN(5) {
	case 0, 1: // IPv4
		proto := protos[rng.IntN(5)]
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, proto
		if rng.IntN(6) == 0 {
			be.PutUint16(ip[6:], 100) // a later fragment
		}
		copy(ip[12:], v4())
		copy(ip[16:], v4())
		b := append(eth(0x0800), ip...)
		return append(b, l4(proto)...)
	case 2: // IPv6, maybe with a hop-by-hop or fragment header
		proto := protos[rng.IntN(5)]
		ip := make([]byte, 40)
		ip[0], ip[7] = 0x60, 64
		copy(ip[8:], v6())
		copy(ip[24:], v6())
		var ext []byte
		switch rng.IntN(3) {
		case 0:
			ip[6] = 0
			ext = []byte{proto, 0, 0, 0, 0, 0, 0, 0}
		case 1:
			ip[6] = 44
			ext = []byte{proto, 0, 0, byte(rng.IntN(2) * 8), 0, 0, 0, 1}
		default:
			ip[6] = proto
		}
		b := append(eth(0x86dd), ip...)
		b = append(b, ext...)
		return append(b, l4(proto)...)
	case 3: // ARP
		a := make([]byte, 28)
		be.PutUint16(a, 1)
		be.PutUint16(a[2:], 0x0800)
		a[4], a[5] = 6, 4
		be.PutUint16(a[6:], uint16(1+rng.IntN(2)))
		copy(a[14:], v4())
		copy(a[24:], v4())
		return append(eth(uint16([]int{0x0806, 0x8035}[rng.IntN(2)])), a...)
	default: // IPv4 UDP in a VLAN
		b := eth(0x8100)
		b = append(b, 0, 10, 0x08, 0x00)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, 17
		copy(ip[12:], v4())
		copy(ip[16:], v4())
		b = append(b, ip...)
		return append(b, l4(17)...)
	}
}

// randFilter is a random tcpdump expression of primitives the index
// answers and some it does not, with and, or, not and parentheses.
func randFilter(rng *rand.Rand, depth int) string {
	if depth == 0 || rng.IntN(3) == 0 {
		prims := []func() string{
			func() string { return "host " + testV4[rng.IntN(3)] },
			func() string { return "ip host " + testV4[rng.IntN(3)] },
			func() string { return []string{"src", "dst"}[rng.IntN(2)] + " host " + testV4[rng.IntN(3)] },
			func() string { return "host " + testV6[rng.IntN(2)] },
			func() string { return fmt.Sprintf("port %d", testPt[rng.IntN(3)]) },
			func() string {
				return fmt.Sprintf("%s %sport %d", []string{"tcp", "udp"}[rng.IntN(2)], []string{"", "src ", "dst "}[rng.IntN(3)], testPt[rng.IntN(3)])
			},
			func() string { return []string{"tcp", "udp", "icmp", "icmp6"}[rng.IntN(4)] },
			func() string { return fmt.Sprintf("ip proto %d", []int{6, 17, 1, 47}[rng.IntN(4)]) },
			func() string { return fmt.Sprintf("ip6 proto %d", []int{6, 17, 58, 0, 44}[rng.IntN(5)]) },
			func() string { return "net 10.0.0.0/30" },
			func() string { return "portrange 50-60" },
			func() string { return "arp" },
			func() string { return "vlan" },
			func() string { return "len > 60" },
			func() string { return "ip[9] = 17" },
		}
		return prims[rng.IntN(len(prims))]()
	}
	switch rng.IntN(6) {
	case 0:
		return "not " + randFilter(rng, depth-1)
	case 1:
		return "(" + randFilter(rng, depth-1) + ")"
	}
	n := 2 + rng.IntN(2)
	parts := make([]string, n)
	for i := range parts {
		parts[i] = randFilter(rng, depth-1)
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString([]string{" and ", " or ", " && ", " || "}[rng.IntN(4)])
		}
		b.WriteString(p)
	}
	return b.String()
}
