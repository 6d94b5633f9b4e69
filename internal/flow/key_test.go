package flow

import (
	"net/netip"
	"testing"
)

var (
	a4 = netip.MustParseAddr("10.0.0.1")
	b4 = netip.MustParseAddr("10.0.0.2")
	a6 = netip.MustParseAddr("2001:db8::1")
	b6 = netip.MustParseAddr("2001:db8::2")
)

func TestDecode(t *testing.T) {
	tcp := pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 443, flags: TCPSyn}
	tests := []struct {
		name      string
		p         pkt
		cut       int // bytes cut off the end (0: none)
		kind      Kind
		proto     uint8
		ports     [2]uint16
		flags     uint8
		vlans     []uint16
		tcpFlags  uint8
		etherType uint16
	}{
		{name: "ethernet tcp", p: tcp, kind: KindIPv4, proto: ProtoTCP, ports: [2]uint16{40000, 443}, flags: FlagPorts, tcpFlags: TCPSyn, etherType: EtherIPv4},
		{name: "802.1Q", p: func() pkt { p := tcp; p.vlans = []uint16{0x2064}; return p }(), kind: KindIPv4, proto: ProtoTCP, ports: [2]uint16{40000, 443}, flags: FlagPorts, vlans: []uint16{100}, tcpFlags: TCPSyn, etherType: EtherIPv4},
		{name: "QinQ and a third tag", p: func() pkt { p := tcp; p.vlans = []uint16{10, 20, 30}; return p }(), kind: KindIPv4, proto: ProtoTCP, ports: [2]uint16{40000, 443}, flags: FlagPorts, vlans: []uint16{10, 20}, tcpFlags: TCPSyn, etherType: EtherIPv4},
		{name: "sll udp", p: pkt{link: LinkSLL, src: a4, dst: b4, proto: ProtoUDP, sport: 53, dport: 5353}, kind: KindIPv4, proto: ProtoUDP, ports: [2]uint16{53, 5353}, flags: FlagPorts, etherType: EtherIPv4},
		{name: "sll2 ipv6 sctp", p: pkt{link: LinkSLL2, src: a6, dst: b6, proto: ProtoSCTP, sport: 1, dport: 2}, kind: KindIPv6, proto: ProtoSCTP, ports: [2]uint16{1, 2}, flags: FlagPorts, etherType: EtherIPv6},
		{name: "null ipv6", p: pkt{link: testNull, src: a6, dst: b6, proto: ProtoUDP, sport: 7, dport: 9}, kind: KindIPv6, proto: ProtoUDP, ports: [2]uint16{7, 9}, flags: FlagPorts, etherType: EtherIPv6},
		{name: "raw ipv6 extension headers", p: pkt{link: LinkRaw, src: a6, dst: b6, proto: ProtoTCP, sport: 5, dport: 6, flags: TCPAck, ext6: []uint8{0, 43, 44, 60, 51}}, kind: KindIPv6, proto: ProtoTCP, ports: [2]uint16{5, 6}, flags: FlagPorts, tcpFlags: TCPAck, etherType: EtherIPv6},
		{name: "ipv6 later fragment", p: pkt{link: LinkRaw, src: a6, dst: b6, proto: ProtoUDP, sport: 5, dport: 6, ext6: []uint8{44}, fragOff: 100}, kind: KindIPv6, proto: ProtoUDP, flags: FlagFragment, etherType: EtherIPv6},
		{name: "ipv4 first fragment", p: pkt{src: a4, dst: b4, proto: ProtoUDP, sport: 5, dport: 6, more: true}, kind: KindIPv4, proto: ProtoUDP, ports: [2]uint16{5, 6}, flags: FlagPorts, etherType: EtherIPv4},
		{name: "ipv4 later fragment", p: pkt{src: a4, dst: b4, proto: ProtoUDP, sport: 5, dport: 6, fragOff: 185}, kind: KindIPv4, proto: ProtoUDP, flags: FlagFragment, etherType: EtherIPv4},
		{name: "icmp echo", p: pkt{src: a4, dst: b4, proto: ProtoICMP, sport: 8, dport: 0}, kind: KindIPv4, proto: ProtoICMP, ports: [2]uint16{8, 0}, flags: FlagPorts, etherType: EtherIPv4},
		{name: "icmp timestamp reply", p: pkt{src: a4, dst: b4, proto: ProtoICMP, sport: 14, dport: 0}, kind: KindIPv4, proto: ProtoICMP, ports: [2]uint16{14, 13}, flags: FlagPorts, etherType: EtherIPv4},
		{name: "icmp unreachable one way", p: pkt{src: a4, dst: b4, proto: ProtoICMP, sport: 3, dport: 1}, kind: KindIPv4, proto: ProtoICMP, ports: [2]uint16{3, 1}, flags: FlagPorts | FlagOneWay, etherType: EtherIPv4},
		{name: "icmpv6 neighbour solicitation", p: pkt{src: a6, dst: b6, proto: ProtoICMPv6, sport: 135, dport: 0}, kind: KindIPv6, proto: ProtoICMPv6, ports: [2]uint16{135, 136}, flags: FlagPorts, etherType: EtherIPv6},
		{name: "icmpv6 packet too big", p: pkt{src: a6, dst: b6, proto: ProtoICMPv6, sport: 2, dport: 0}, kind: KindIPv6, proto: ProtoICMPv6, ports: [2]uint16{2, 0}, flags: FlagPorts | FlagOneWay, etherType: EtherIPv6},
		{name: "gre no ports", p: pkt{src: a4, dst: b4, proto: 47, payload: 20}, kind: KindIPv4, proto: 47, etherType: EtherIPv4},
		{name: "tcp cut before flags", p: tcp, cut: 10, kind: KindIPv4, proto: ProtoTCP, ports: [2]uint16{40000, 443}, flags: FlagPorts | FlagCut, etherType: EtherIPv4},
		{name: "tcp cut before ports", p: tcp, cut: 18, kind: KindIPv4, proto: ProtoTCP, flags: FlagCut, etherType: EtherIPv4},
		{name: "ipv4 cut before addresses", p: tcp, cut: 30, kind: KindLink, flags: FlagCut, etherType: EtherIPv4},
		{name: "ethernet cut", p: tcp, cut: 50, kind: KindNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.p.frame()
			b = b[:len(b)-tt.cut]
			var k Key
			got := Decode(&k, tt.p.lt(), 3, b)
			if k.Kind != tt.kind || k.Proto != tt.proto || [2]uint16{k.SrcPort, k.DstPort} != tt.ports || k.Flags != tt.flags || k.EtherType != tt.etherType || k.Iface != 3 {
				t.Errorf("key %+v, want kind %v proto %d ports %v flags %#x ethertype %#x", k, tt.kind, tt.proto, tt.ports, tt.flags, tt.etherType)
			}
			if got.TCPFlags != tt.tcpFlags {
				t.Errorf("tcp flags %#x, want %#x", got.TCPFlags, tt.tcpFlags)
			}
			if int(k.NVLAN) != len(tt.vlans) {
				t.Fatalf("vlans %v, want %v", k.VLAN[:k.NVLAN], tt.vlans)
			}
			for i, v := range tt.vlans {
				if k.VLAN[i] != v {
					t.Errorf("vlan %d = %d, want %d", i, k.VLAN[i], v)
				}
			}
			if tt.kind == KindIPv4 || tt.kind == KindIPv6 {
				if k.SrcAddr() != tt.p.src || k.DstAddr() != tt.p.dst {
					t.Errorf("addresses %v %v, want %v %v", k.SrcAddr(), k.DstAddr(), tt.p.src, tt.p.dst)
				}
			}
		})
	}
}

func TestDecodeNonIP(t *testing.T) {
	arp := append(append(append([]byte{}, macB[:]...), macA[:]...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	var k Key
	Decode(&k, LinkEthernet, 0, arp)
	if k.Kind != KindLink || k.EtherType != 0x0806 || [6]byte(k.Src[:6]) != macA || [6]byte(k.Dst[:6]) != macB {
		t.Fatalf("arp key %+v", k)
	}
	if k.CommunityID(0) != "" {
		t.Errorf("community id of a non-IP key %q, want none", k.CommunityID(0))
	}
	Decode(&k, 105, 0, arp) // 802.11: not decoded
	if k.Kind != KindNone {
		t.Errorf("802.11 key %+v, want kind none", k)
	}
}

// FuzzDecode checks that Decode never panics and that what it returns
// is consistent, for any link type and bytes.
func FuzzDecode(f *testing.F) {
	for _, p := range []pkt{
		{src: a4, dst: b4, proto: ProtoTCP, sport: 1, dport: 2, flags: TCPSyn},
		{link: LinkRaw, src: a6, dst: b6, proto: ProtoUDP, ext6: []uint8{0, 44, 60}},
		{link: LinkSLL2, src: a6, dst: b6, proto: ProtoICMPv6, sport: 128},
		{vlans: []uint16{1, 2, 3}, src: a4, dst: b4, proto: ProtoICMP, sport: 3, dport: 3},
	} {
		f.Add(p.lt(), p.frame())
	}
	f.Add(uint32(LinkLoop), []byte{0, 0, 0, 2, 0x4f})
	f.Add(uint32(LinkIPv4), []byte{0x41, 0, 0, 0})
	f.Fuzz(func(t *testing.T, lt uint32, b []byte) {
		var k Key
		p := Decode(&k, lt, 0, b)
		if k.Flags&FlagPorts == 0 && (k.SrcPort != 0 || k.DstPort != 0) {
			t.Errorf("ports without FlagPorts: %+v", k)
		}
		if p.TCP && (k.Proto != ProtoTCP || k.Flags&FlagPorts == 0) {
			t.Errorf("tcp flags without a tcp key: %+v", k)
		}
		if k.NVLAN > MaxVLANs {
			t.Errorf("%d vlans", k.NVLAN)
		}
		c, _ := k.Canonical()
		if r, _ := k.Reverse().Canonical(); r != c && k.Flags&FlagOneWay == 0 {
			t.Errorf("canonical keys of both directions differ: %+v %+v", c, r)
		}
		// Every key round-trips through a record.
		rec := Record{Key: k, Packets: [2]uint64{1, 0}, Bytes: [2]uint64{uint64(len(b)), 0}, Captured: [2]uint64{uint64(len(b)), 0}}
		var e Encoder
		buf := e.AppendRecord(e.AppendHeader(nil, "x"), &rec)
		fl, err := Parse(buf)
		if err != nil || len(fl.Records) != 1 || fl.Records[0] != rec {
			t.Fatalf("record of key %+v: %v, %+v", k, err, fl)
		}
	})
}
