package capgen

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Filter is a filter the test runs, with the class it counts under.
type Filter struct {
	Class string
	Expr  string // "" selects every packet
}

// Classic is the fixed list: the classic forms of pcap-filter(7), on
// the values of the pools Generate draws from, including forms libpcap
// refuses for some link types (the query must refuse them too).
var Classic = classic()

func classic() []Filter {
	groups := []struct {
		class string
		exprs []string
	}{
		{"none", []string{""}},
		{"len", []string{"len > 100", "len <= 60", "less 80", "greater 200", "len = 54", "len >= 1000", "len < 40 and ip"}},
		{"host", []string{"host 10.0.0.1", "src host 10.0.0.2", "dst host 192.168.1.10", "host 2001:db8::1", "ip6 host 2001:db8::2",
			"ip host 10.0.1.7", "host 10.0.0.1 and host 10.0.0.2", "src 10.0.0.1 or dst 2001:db8::2", "host 0.0.0.0", "dst host 255.255.255.255",
			"host 10.9.9.9", "src host 198.51.100.7", "host 2001:db8:dead::1", "ip6 dst host 2001:db8:dead::1"}},
		{"net", []string{"net 10.0.0.0/24", "net 10.0.0.0 mask 255.255.0.0", "src net 192.168.1.0/24", "net 2001:db8::/32",
			"dst net 224.0.0.0/4", "net 10", "net 192.168.1", "ip6 net fe80::/10"}},
		{"port", []string{"port 53", "tcp port 80", "udp port 53", "src port 443", "dst port 8080", "sctp port 5060", "port 0",
			"port 65535", "tcp dst port 1234", "portrange 40-60", "tcp portrange 1-1024", "udp src portrange 1000-2000",
			"ip and port 22", "ip6 and udp port 123", "port 31337", "udp port 7777", "tcp src port 31337", "sctp port 7777",
			"port 64", "host 10.9.9.9 or port 31337"}},
		{"octal", []string{"port 053", "port 0x35", "ip[9] = 06", "len > 0100", "ip proto 021", "tcp[13] & 0x12 = 0x12",
			"vlan 012", "tcp port 0120", "portrange 040-065", "len = 0x36", "port 0100", "udp port 0100", "port 017141"}},
		{"proto", []string{"ip", "ip6", "arp", "rarp", "tcp", "udp", "icmp", "icmp6", "sctp", "igmp", "ip proto 47", "ip proto 4",
			"ip proto 41", "ip6 proto 17", "ip6 proto 58", "ip proto gre", "ip6 proto 44", "ip6 proto 0", "ip proto 99", "proto 17"}},
		{"protochain", []string{"ip6 protochain 17", "ip6 protochain 6", "ip protochain 6", "protochain 17", "ip6 protochain 58"}},
		{"bytes", []string{"ip[9] = 6", "ip[0] & 0xf > 5", "ip[6:2] & 0x1fff != 0", "tcp[tcpflags] & tcp-syn != 0",
			"tcp[tcpflags] & (tcp-syn|tcp-ack) = tcp-syn", "tcp[13] = 18", "udp[0:2] = 53", "icmp[icmptype] = icmp-echo",
			"ip6[6] = 17", "ether[12:2] = 0x0800", "ip[2:2] > 100", "tcp[20] = 0", "ip[0] & 0xf < 5", "ip6[40] = 17",
			"ip[6:2] & 0x3fff != 0", "icmp6[icmp6type] = icmp6-echo", "ip[0] >> 4 = 6", "link[0] = 0", "ip[40:4] = 0"}},
		{"ether", []string{"ether host 00:11:22:33:44:01", "ether src 00:11:22:33:44:02", "ether dst ff:ff:ff:ff:ff:ff",
			"ether broadcast", "ether multicast", "ether proto 0x0806", "ether[0] & 1 != 0", "ether proto \\ip6"}},
		{"broadcast", []string{"ip broadcast", "ip multicast", "ip6 multicast", "broadcast", "multicast"}},
		{"encap", []string{"vlan", "vlan 10", "vlan and ip", "vlan 100 and vlan 10", "vlan and tcp port 80", "mpls", "mpls 16",
			"mpls and ip", "mpls 100 and mpls", "pppoes", "pppoes and ip", "pppoes 7 and udp", "pppoed", "not vlan and ip",
			"vlan and ip6 and udp port 53", "mpls and host 10.0.0.1"}},
		{"direction", []string{"inbound", "outbound", "inbound and udp", "not outbound"}},
		{"ifindex", []string{"ifindex 2", "ifindex 7 and tcp", "not ifindex 1"}},
		{"wlan", []string{"wlan type data", "wlan type mgt", "wlan type ctl subtype ack", "wlan host 00:11:22:33:44:01",
			"wlan addr1 ff:ff:ff:ff:ff:ff", "type data subtype qos-data", "wlan src 00:11:22:33:44:02", "wlan type data and ip"}},
		{"tunnel", []string{"ip proto 4 and host 10.0.0.1", "proto 41", "ip proto gre and host 192.168.1.10", "ip6 and ip proto 4",
			"ip proto 41 and udp"}},
		{"compound", []string{"not tcp", "not (host 10.0.0.1 or port 53)", "(tcp or udp) and not port 80",
			"host 10.0.0.1 and (port 53 or port 80)", "tcp and not host 10.0.0.2 or udp", "!icmp && (ip || ip6)",
			"host 10.0.0.1 or port 53", "port 53 and host 10.0.0.2 and udp", "not ip and not ip6", "host 10.0.0.1 or arp"}},
	}
	var fs []Filter
	for _, g := range groups {
		for _, e := range g.exprs {
			fs = append(fs, Filter{Class: g.class, Expr: e})
		}
	}
	return fs
}

// Random returns n filters composed of c's own addresses, ports,
// protocols and MACs with and, or, not and parentheses, class "random".
func Random(c *Capture, seed uint64, n int) []Filter {
	rng := rand.New(rand.NewPCG(seed, uint64(len(c.Name))<<32|uint64(len(c.Packets))))
	fs := make([]Filter, 0, n)
	for range n {
		fs = append(fs, Filter{Class: "random", Expr: randExpr(rng, c, 2)})
	}
	return fs
}

func randExpr(rng *rand.Rand, c *Capture, depth int) string {
	if depth == 0 || rng.IntN(3) == 0 {
		return randTerm(rng, c)
	}
	a, b := randExpr(rng, c, depth-1), randExpr(rng, c, depth-1)
	switch rng.IntN(5) {
	case 0:
		return "not (" + a + ")"
	case 1, 2:
		return "(" + a + ") and (" + b + ")"
	case 3:
		return a + " or " + b // equal precedence, left to right
	}
	return "(" + a + " or " + b + ")"
}

func randTerm(rng *rand.Rand, c *Capture) string {
	dir := pick(rng, []string{"", "src ", "dst "})
	for {
		switch rng.IntN(10) {
		case 0, 1:
			if len(c.Addrs4) > 0 {
				return pick(rng, []string{"", "ip "}) + dir + "host " + pick(rng, c.Addrs4)
			}
		case 2:
			if len(c.Addrs6) > 0 {
				return dir + "host " + pick(rng, c.Addrs6)
			}
		case 3, 4:
			if len(c.Ports) > 0 {
				return pick(rng, []string{"", "tcp ", "udp ", "sctp "}) + dir + "port " + fmt.Sprint(pick(rng, c.Ports))
			}
		case 5:
			if len(c.Protos) > 0 {
				return pick(rng, []string{"ip", "ip6"}) + " proto " + fmt.Sprint(pick(rng, c.Protos))
			}
		case 6:
			if len(c.Addrs4) > 0 {
				a := pick(rng, c.Addrs4)
				return dir + "net " + a[:strings.LastIndexByte(a, '.')] + ".0/24"
			}
		case 7:
			return pick(rng, []string{"len > ", "len < ", "greater ", "less "}) + fmt.Sprint(rng.IntN(300))
		case 8:
			return pick(rng, []string{"tcp", "udp", "icmp", "ip", "ip6", "arp", "sctp", "icmp6", "vlan", "mpls", "pppoes"})
		default:
			if len(c.MACs) > 0 && c.Link.Type == 1 {
				return "ether " + dir + "host " + pick(rng, c.MACs)
			}
		}
	}
}
