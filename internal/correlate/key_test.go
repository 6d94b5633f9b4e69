package correlate

import (
	"encoding/binary"
	"testing"
)

// v4 is an IPv4 packet under construction: the fields a test varies.
type v4 struct {
	src, dst   [4]byte
	ttl, tos   uint8
	id         uint16
	frag       uint16 // flags and offset as on the wire
	proto      uint8
	csum       uint16 // the header checksum field (not computed: the key must ignore it)
	l4         []byte // everything after the header
	opts       []byte // header options (a multiple of 4 bytes)
	totalExtra int    // bytes after the packet that the total length leaves out (padding)
}

func (p v4) bytes() []byte {
	ihl := 20 + len(p.opts)
	b := make([]byte, ihl, ihl+len(p.l4)+p.totalExtra)
	b[0] = 0x40 | byte(ihl/4)
	b[1] = p.tos
	binary.BigEndian.PutUint16(b[2:], uint16(ihl+len(p.l4)))
	binary.BigEndian.PutUint16(b[4:], p.id)
	binary.BigEndian.PutUint16(b[6:], p.frag)
	b[8], b[9] = p.ttl, p.proto
	binary.BigEndian.PutUint16(b[10:], p.csum)
	copy(b[12:], p.src[:])
	copy(b[16:], p.dst[:])
	copy(b[20:], p.opts)
	b = append(b, p.l4...)
	return append(b, make([]byte, p.totalExtra)...)
}

// v6 is an IPv6 packet under construction.
type v6 struct {
	src, dst [16]byte
	hop, tc  uint8
	flow     uint32
	next     uint8
	ext      []byte // extension headers, already chained to next
	l4       []byte
}

func (p v6) bytes() []byte {
	b := make([]byte, 40)
	binary.BigEndian.PutUint32(b, 6<<28|uint32(p.tc)<<20|p.flow&0xfffff)
	binary.BigEndian.PutUint16(b[4:], uint16(len(p.ext)+len(p.l4)))
	b[6], b[7] = p.next, p.hop
	copy(b[8:], p.src[:])
	copy(b[24:], p.dst[:])
	return append(append(b, p.ext...), p.l4...)
}

func udp(sport, dport, csum uint16, payload string) []byte {
	b := make([]byte, 8, 8+len(payload))
	binary.BigEndian.PutUint16(b[0:], sport)
	binary.BigEndian.PutUint16(b[2:], dport)
	binary.BigEndian.PutUint16(b[4:], uint16(8+len(payload)))
	binary.BigEndian.PutUint16(b[6:], csum)
	return append(b, payload...)
}

// tcp is a TCP segment; flags, window, checksum and options vary freely.
func tcp(seq, ack uint32, flags uint8, win, csum uint16, opts []byte, payload string) []byte {
	hl := 20 + len(opts)
	b := make([]byte, hl, hl+len(payload))
	binary.BigEndian.PutUint16(b[0:], 40000)
	binary.BigEndian.PutUint16(b[2:], 80)
	binary.BigEndian.PutUint32(b[4:], seq)
	binary.BigEndian.PutUint32(b[8:], ack)
	b[12], b[13] = byte(hl/4)<<4, flags
	binary.BigEndian.PutUint16(b[14:], win)
	binary.BigEndian.PutUint16(b[16:], csum)
	copy(b[20:], opts)
	return append(b, payload...)
}

func icmpEcho(typ uint8, csum, id, seq uint16, payload string) []byte {
	b := []byte{typ, 0, byte(csum >> 8), byte(csum), byte(id >> 8), byte(id), byte(seq >> 8), byte(seq)}
	return append(b, payload...)
}

// eth wraps l3 in an Ethernet header with these MACs and VLAN tags.
func eth(l3 []byte, mac byte, etherType uint16, vlans ...uint16) []byte {
	b := []byte{mac, 2, 3, 4, 5, 6, mac, 8, 9, 10, 11, 12}
	for _, v := range vlans {
		b = binary.BigEndian.AppendUint16(b, etherVLAN)
		b = binary.BigEndian.AppendUint16(b, v)
	}
	b = binary.BigEndian.AppendUint16(b, etherType)
	return append(b, l3...)
}

func sll(l3 []byte, etherType uint16) []byte {
	b := make([]byte, 16)
	b[1] = 4 // sent by us
	binary.BigEndian.PutUint16(b[14:], etherType)
	return append(b, l3...)
}

func sll2(l3 []byte, etherType uint16) []byte {
	b := make([]byte, 20)
	binary.BigEndian.PutUint16(b[0:], etherType)
	b[4] = 7 // ifindex
	return append(b, l3...)
}

var (
	addrA  = [4]byte{198, 18, 1, 1}
	addrC  = [4]byte{198, 18, 2, 2}
	addr6A = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 1}
	addr6C = [16]byte{0x20, 0x01, 0x0d, 0xb8, 15: 2}
)

// base packets the cases vary.
func baseUDP() v4 {
	return v4{src: addrA, dst: addrC, ttl: 64, id: 0x1234, proto: protoUDP, l4: udp(5000, 9999, 0xabcd, "hello, correlate")}
}

func baseTCP(seq, ack uint32, flags uint8, win, csum uint16, opts []byte, payload string) v4 {
	return v4{src: addrA, dst: addrC, ttl: 64, id: 7, frag: 0x4000, proto: protoTCP, l4: tcp(seq, ack, flags, win, csum, opts, payload)}
}

func baseV6(l4 []byte, next uint8) v6 {
	return v6{src: addr6A, dst: addr6C, hop: 64, next: next, l4: l4}
}

func with(p v4, f func(*v4)) v4 { f(&p); return p }

func with6(p v6, f func(*v6)) v6 { f(&p); return p }

type framed struct {
	link uint16
	b    []byte
}

func e(l3 []byte) framed              { return framed{linkEthernet, eth(l3, 0xa0, etherIPv4)} }
func e6(l3 []byte) framed             { return framed{linkEthernet, eth(l3, 0xa0, etherIPv6)} }
func raw(l3 []byte) framed            { return framed{linkRaw, l3} }
func other(l uint16, b []byte) framed { return framed{l, b} }

// TestKeySameDifferent: two frames of the same packet at two capture
// points key alike whatever changes on the way; a change to what
// identifies the packet keys differently.
func TestKeySameDifferent(t *testing.T) {
	u := baseUDP()
	t6 := baseV6(tcp(1000, 2000, 0x18, 500, 0x1111, nil, "six"), protoTCP)
	hbh := []byte{protoTCP, 0, 1, 4, 0, 0, 0, 0} // hop-by-hop, a PadN option, 8 bytes
	frag6 := func(off uint16, more bool, id uint32) []byte {
		b := []byte{protoUDP, 0, 0, 0, 0, 0, 0, 0}
		fo := off << 3
		if more {
			fo |= 1
		}
		binary.BigEndian.PutUint16(b[2:], fo)
		binary.BigEndian.PutUint32(b[4:], id)
		return b
	}
	big := udp(5000, 9999, 0, "a datagram of many bytes, cut in fragments of eight-byte multiples......")
	fragA := with(u, func(p *v4) { p.frag, p.l4 = 0x2000, big[:32] })                  // first, more fragments
	fragB := with(u, func(p *v4) { p.frag, p.l4 = 4, big[32:] })                       // offset 32 bytes, last
	fragB2 := with(u, func(p *v4) { p.frag, p.l4 = 4, append([]byte{}, big[32:]...) }) // the same, other buffer
	fragB2.ttl, fragB2.csum = 3, 99
	tests := []struct {
		name string
		a, b framed
		same bool
	}{
		{"ttl, dscp/ecn, checksum", e(u.bytes()), e(with(u, func(p *v4) { p.ttl, p.tos, p.csum = 1, 0xb9, 0xffff }).bytes()), true},
		{"macs and vlan tags", e(u.bytes()), framed{linkEthernet, eth(u.bytes(), 0xbb, etherIPv4, 100, 200)}, true},
		{"ethernet padding", e(u.bytes()), e(with(u, func(p *v4) { p.totalExtra = 6 }).bytes()), true},
		{"udp checksum", e(u.bytes()), e(with(u, func(p *v4) { p.l4 = udp(5000, 9999, 0, "hello, correlate") }).bytes()), true},
		{"ip options (record route, changed by routers)", e(u.bytes()), e(with(u, func(p *v4) { p.opts = []byte{7, 3, 4, 0} }).bytes()), true},
		{"ethernet, sll, sll2, raw", e(u.bytes()), other(linkSLL, sll(u.bytes(), etherIPv4)), true},
		{"sll2", e(u.bytes()), other(linkSLL2, sll2(u.bytes(), etherIPv4)), true},
		{"raw", raw(u.bytes()), other(linkIPv4, u.bytes()), true},
		{"ip id", e(u.bytes()), e(with(u, func(p *v4) { p.id++ }).bytes()), false},
		{"source address", e(u.bytes()), e(with(u, func(p *v4) { p.src[3] = 9 }).bytes()), false},
		{"destination address", e(u.bytes()), e(with(u, func(p *v4) { p.dst[0] = 10 }).bytes()), false},
		{"protocol", e(u.bytes()), e(with(u, func(p *v4) { p.proto = 136 }).bytes()), false},
		{"udp source port", e(u.bytes()), e(with(u, func(p *v4) { p.l4 = udp(5001, 9999, 0xabcd, "hello, correlate") }).bytes()), false},
		{"udp destination port", e(u.bytes()), e(with(u, func(p *v4) { p.l4 = udp(5000, 9998, 0xabcd, "hello, correlate") }).bytes()), false},
		{"udp payload", e(u.bytes()), e(with(u, func(p *v4) { p.l4 = udp(5000, 9999, 0xabcd, "hello, correlatE") }).bytes()), false},
		{"tcp flags, window, checksum, options", e(baseTCP(1, 2, 0x10, 100, 5, nil, "x").bytes()),
			e(baseTCP(1, 2, 0x18, 9999, 6, []byte{2, 4, 5, 0xb4}, "x").bytes()), true},
		{"tcp seq", e(baseTCP(1, 2, 0x10, 100, 5, nil, "x").bytes()), e(baseTCP(2, 2, 0x10, 100, 5, nil, "x").bytes()), false},
		{"tcp ack", e(baseTCP(1, 2, 0x10, 100, 5, nil, "x").bytes()), e(baseTCP(1, 3, 0x10, 100, 5, nil, "x").bytes()), false},
		{"tcp payload", e(baseTCP(1, 2, 0x10, 100, 5, nil, "x").bytes()), e(baseTCP(1, 2, 0x10, 100, 5, nil, "y").bytes()), false},
		{"icmp checksum", e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 5, "ping") }).bytes()),
			e(with(u, func(p *v4) { p.proto, p.l4, p.ttl = protoICMP, icmpEcho(8, 2, 77, 5, "ping"), 9 }).bytes()), true},
		{"icmp echo sequence", e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 5, "ping") }).bytes()),
			e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 6, "ping") }).bytes()), false},
		{"icmp echo identifier", e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 5, "ping") }).bytes()),
			e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 78, 5, "ping") }).bytes()), false},
		{"icmp request and reply", e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 5, "ping") }).bytes()),
			e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(0, 1, 77, 5, "ping") }).bytes()), false},
		{"v4 fragments of one datagram", e(fragA.bytes()), e(fragB.bytes()), false},
		{"v4 later fragment, ttl and checksum", e(fragB.bytes()), e(fragB2.bytes()), true},
		{"v4 whole datagram and its first fragment", e(with(u, func(p *v4) { p.l4 = big }).bytes()), e(fragA.bytes()), false},
		{"v6 hop limit, traffic class, flow label", e6(t6.bytes()), e6(with6(t6, func(p *v6) { p.hop, p.tc, p.flow = 1, 0xb8, 0xfffff }).bytes()), true},
		{"v6 on sll, raw", e6(t6.bytes()), other(linkSLL, sll(t6.bytes(), etherIPv6)), true},
		{"v6 raw and linktype ipv6", raw(t6.bytes()), other(linkIPv6, t6.bytes()), true},
		{"v6 vlan", e6(t6.bytes()), framed{linkEthernet, eth(t6.bytes(), 1, etherIPv6, 5)}, true},
		{"v6 hop-by-hop header", e6(t6.bytes()), e6(with6(t6, func(p *v6) { p.next, p.ext = 0, hbh }).bytes()), true},
		{"v6 source", e6(t6.bytes()), e6(with6(t6, func(p *v6) { p.src[0] = 0xfe }).bytes()), false},
		{"v6 tcp seq", e6(t6.bytes()), e6(with6(t6, func(p *v6) { p.l4 = tcp(1001, 2000, 0x18, 500, 0x1111, nil, "six") }).bytes()), false},
		{"v6 fragments of one datagram", e6(with6(t6, func(p *v6) { p.next, p.ext, p.l4 = 44, frag6(0, true, 9), big[:32] }).bytes()),
			e6(with6(t6, func(p *v6) { p.next, p.ext, p.l4 = 44, frag6(4, false, 9), big[32:] }).bytes()), false},
		{"v6 fragment id", e6(with6(t6, func(p *v6) { p.next, p.ext, p.l4 = 44, frag6(4, false, 9), big[32:] }).bytes()),
			e6(with6(t6, func(p *v6) { p.next, p.ext, p.l4 = 44, frag6(4, false, 10), big[32:] }).bytes()), false},
		{"icmpv6 echo", e6(with6(t6, func(p *v6) { p.next, p.l4 = protoICMPv6, icmpEcho(128, 1, 3, 4, "p6") }).bytes()),
			e6(with6(t6, func(p *v6) { p.next, p.l4, p.hop = protoICMPv6, icmpEcho(128, 7, 3, 4, "p6"), 2 }).bytes()), true},
		{"icmpv6 echo sequence", e6(with6(t6, func(p *v6) { p.next, p.l4 = protoICMPv6, icmpEcho(128, 1, 3, 4, "p6") }).bytes()),
			e6(with6(t6, func(p *v6) { p.next, p.l4 = protoICMPv6, icmpEcho(128, 1, 3, 5, "p6") }).bytes()), false},
		{"arp: macs kept, they are its payload", framed{linkEthernet, eth([]byte("arp who-has"), 1, 0x0806)}, framed{linkEthernet, eth([]byte("arp who-has"), 2, 0x0806)}, true},
		{"arp payload", framed{linkEthernet, eth([]byte("arp who-has"), 1, 0x0806)}, framed{linkEthernet, eth([]byte("arp is-at.."), 1, 0x0806)}, false},
		{"v4 and v6 of one payload", e(u.bytes()), e6(baseV6(udp(5000, 9999, 0xabcd, "hello, correlate"), protoUDP).bytes()), false},
		{"unknown link type", other(147, []byte("abc")), other(147, []byte("abc")), true},
		{"unknown link type, other bytes", other(147, []byte("abc")), other(147, []byte("abd")), false},
	}
	h := newHasher()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ka, kb := h.KeyOf(tc.a.link, tc.a.b), h.KeyOf(tc.b.link, tc.b.b)
			if (ka == kb) != tc.same {
				t.Errorf("keys equal = %v, want %v:\n a %+v\n b %+v", ka == kb, tc.same, ka, kb)
			}
		})
	}
}

// TestKeyFields: what KeyOf reads into each field.
func TestKeyFields(t *testing.T) {
	u := baseUDP()
	tests := []struct {
		name string
		in   framed
		want Key // Hash not compared
	}{
		{"udp v4", e(u.bytes()), Key{Src: [16]byte{198, 18, 1, 1}, Dst: [16]byte{198, 18, 2, 2}, Version: 4, Proto: protoUDP,
			ID: 0x1234, SrcPort: 5000, DstPort: 9999, Len: 16}},
		{"tcp v4, don't fragment not in Frag", e(baseTCP(11, 22, 0x10, 1, 1, []byte{1, 1, 1, 1}, "abc").bytes()), Key{Src: [16]byte{198, 18, 1, 1},
			Dst: [16]byte{198, 18, 2, 2}, Version: 4, Proto: protoTCP, ID: 7, SrcPort: 40000, DstPort: 80, Seq: 11, Ack: 22, Len: 3}},
		{"icmp echo", e(with(u, func(p *v4) { p.proto, p.l4 = protoICMP, icmpEcho(8, 1, 77, 5, "ping") }).bytes()), Key{Src: [16]byte{198, 18, 1, 1},
			Dst: [16]byte{198, 18, 2, 2}, Version: 4, Proto: protoICMP, ID: 0x1234, SrcPort: 8 << 8, DstPort: 77, Seq: 5, Len: 4}},
		{"v4 later fragment: no ports", e(with(u, func(p *v4) { p.frag, p.l4 = 0x2000|3, []byte("24 bytes of fragment....") }).bytes()),
			Key{Src: [16]byte{198, 18, 1, 1}, Dst: [16]byte{198, 18, 2, 2}, Version: 4, Proto: protoUDP, ID: 0x1234, Frag: 3<<1 | 1, Len: 24}},
		{"v6 udp after hop-by-hop and destination options", e6(v6{src: addr6A, dst: addr6C, next: 0,
			ext: []byte{60, 0, 1, 4, 0, 0, 0, 0, protoUDP, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, l4: udp(1, 2, 3, "xy")}.bytes()),
			Key{Src: addr6A, Dst: addr6C, Version: 6, Proto: protoUDP, SrcPort: 1, DstPort: 2, Len: 2}},
		{"arp", framed{linkEthernet, eth([]byte("0123456789"), 1, 0x0806, 3)}, Key{Type: 0x0806, Len: 10}},
		{"truncated udp header", e(with(u, func(p *v4) { p.l4 = p.l4[:5] }).bytes()), Key{Src: [16]byte{198, 18, 1, 1},
			Dst: [16]byte{198, 18, 2, 2}, Version: 4, Proto: protoUDP, ID: 0x1234, Len: 5}},
		{"short ethernet", framed{linkEthernet, []byte{1, 2, 3}}, Key{Type: 0x8000 | linkEthernet, Len: 3}},
	}
	h := newHasher()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			k := h.KeyOf(tc.in.link, tc.in.b)
			k.Hash = 0
			if k != tc.want {
				t.Errorf("KeyOf =\n %+v\nwant\n %+v", k, tc.want)
			}
		})
	}
}

// TestKeyTruncatedCapture: a capture cut by the snap length keys on the
// length the IP header gives, so it differs from the whole packet only
// in the hash; bytes past the end never panic.
func TestKeyTruncatedCapture(t *testing.T) {
	h := newHasher()
	full := e(baseTCP(1, 2, 0x18, 1, 1, nil, "a payload longer than the snap length").bytes())
	for n := range len(full.b) + 1 {
		k := h.KeyOf(linkEthernet, full.b[:n])
		if n >= 14+20+20 && k.Len != uint32(len("a payload longer than the snap length")) {
			t.Errorf("cut at %d: Len %d, want the IP header's", n, k.Len)
		}
	}
}

func TestKeyOfAllocs(t *testing.T) {
	h := newHasher()
	b := e(baseUDP().bytes()).b
	if n := testing.AllocsPerRun(100, func() { h.KeyOf(linkEthernet, b) }); n != 0 {
		t.Errorf("KeyOf allocates %v times, want 0", n)
	}
}
