package capgen

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
)

// pktgen makes the packets of one capture. Every builder returns the
// bytes and the length of the headers in them (what a snaplen cut
// aims at).
type pktgen struct {
	rng *rand.Rand
	c   *Capture
}

const (
	etherIPv4 = 0x0800
	etherARP  = 0x0806
	etherIPv6 = 0x86dd
	etherVLAN = 0x8100
	etherQinQ = 0x88a8
	etherMPLS = 0x8847
	etherPPPS = 0x8864
)

// frame makes one packet for the capture's link type.
func (g *pktgen) frame() ([]byte, int) {
	switch g.c.Link.Type {
	case 1:
		return g.ether()
	case 113:
		return g.sll(false)
	case 276:
		return g.sll(true)
	case 101:
		return g.l3Any()
	case 228:
		if g.rng.IntN(20) == 0 {
			return g.ip6()
		}
		return g.ip4()
	case 229:
		if g.rng.IntN(20) == 0 {
			return g.ip4()
		}
		return g.ip6()
	case 0, 108:
		return g.null()
	case 105:
		return g.wlan()
	case 127:
		b, h := g.wlan()
		rt := []byte{0, 0, 8, 0, 0, 0, 0, 0} // version 0, length 8 (LE), nothing present
		return append(rt, b...), h + len(rt)
	}
	return g.l3Any()
}

// l3Any: IPv4 or IPv6, now and then a version that is neither.
func (g *pktgen) l3Any() ([]byte, int) {
	switch r := g.rng.IntN(20); {
	case r == 0:
		b, h := g.ip4()
		if len(b) > 0 {
			b[0] = 0x50 | b[0]&0x0f // version 5
		}
		return b, h
	case r < 10:
		return g.ip4()
	}
	return g.ip6()
}

// l3 returns an IPv4, IPv6 or ARP packet and its ethertype, which one
// in twenty times is the wrong one for it.
func (g *pktgen) l3(arp bool) ([]byte, int, uint16) {
	var b []byte
	var h int
	var et uint16
	switch r := g.rng.IntN(20); {
	case arp && r == 0:
		b, h, et = g.arp(), 28, etherARP
	case r < 11:
		b, h = g.ip4()
		et = etherIPv4
	default:
		b, h = g.ip6()
		et = etherIPv6
	}
	if g.rng.IntN(20) == 0 {
		et = map[uint16]uint16{etherIPv4: etherIPv6, etherIPv6: etherIPv4, etherARP: etherIPv4}[et]
	}
	return b, h, et
}

func (g *pktgen) macPick() []byte {
	m := pick(g.rng, poolM)
	note(&g.c.MACs, m)
	return mac(m)
}

// ether: Ethernet, maybe with 802.1Q, QinQ, MPLS or PPPoE session.
func (g *pktgen) ether() ([]byte, int) {
	hdr := append(g.macPick(), g.macPick()...)
	b, h, et := g.l3(true)
	switch r := g.rng.IntN(10); {
	case r == 0 || r == 1: // one or two VLAN tags
		tags := 1 + g.rng.IntN(2)
		outer := uint16(etherVLAN)
		if tags == 2 && g.rng.IntN(2) == 0 {
			outer = etherQinQ
		}
		hdr = binary.BigEndian.AppendUint16(hdr, outer)
		for i := range tags {
			vid := pick(g.rng, []uint16{1, 10, 100, 4094})
			hdr = binary.BigEndian.AppendUint16(hdr, vid|uint16(g.rng.IntN(8))<<13)
			if i < tags-1 {
				hdr = binary.BigEndian.AppendUint16(hdr, etherVLAN)
			}
		}
		hdr = binary.BigEndian.AppendUint16(hdr, et)
	case r == 2: // MPLS, one or two labels
		hdr = binary.BigEndian.AppendUint16(hdr, etherMPLS)
		labels := 1 + g.rng.IntN(2)
		for i := range labels {
			l := pick(g.rng, []uint32{16, 100, 1048575})
			v := l<<12 | 64
			if i == labels-1 {
				v |= 1 << 8 // bottom of stack
			}
			hdr = binary.BigEndian.AppendUint32(hdr, v)
		}
	case r == 3: // PPPoE session
		hdr = binary.BigEndian.AppendUint16(hdr, etherPPPS)
		hdr = append(hdr, 0x11, 0)
		hdr = binary.BigEndian.AppendUint16(hdr, pick(g.rng, []uint16{7, 0x1234}))
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(b)+2))
		ppp := uint16(0x0021)
		if et == etherIPv6 {
			ppp = 0x0057
		}
		hdr = binary.BigEndian.AppendUint16(hdr, ppp)
	default:
		hdr = binary.BigEndian.AppendUint16(hdr, et)
	}
	return append(hdr, b...), len(hdr) + h
}

// sll: Linux cooked capture, v1 (16 bytes) or v2 (20 bytes).
func (g *pktgen) sll(v2 bool) ([]byte, int) {
	b, h, et := g.l3(true)
	pkttype := byte(g.rng.IntN(5)) // host, broadcast, multicast, otherhost, outgoing
	addr := append(g.macPick(), 0, 0)
	var hdr []byte
	if v2 {
		hdr = binary.BigEndian.AppendUint16(hdr, et)
		hdr = append(hdr, 0, 0)
		hdr = binary.BigEndian.AppendUint32(hdr, pick(g.rng, []uint32{1, 2, 3, 7}))
		hdr = binary.BigEndian.AppendUint16(hdr, 1) // ARPHRD_ETHER
		hdr = append(hdr, pkttype, 6)
		hdr = append(hdr, addr...)
	} else {
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(pkttype))
		hdr = binary.BigEndian.AppendUint16(hdr, 1)
		hdr = binary.BigEndian.AppendUint16(hdr, 6)
		hdr = append(hdr, addr...)
		hdr = binary.BigEndian.AppendUint16(hdr, et)
	}
	return append(hdr, b...), len(hdr) + h
}

// null: BSD null (the family in the file's byte order) or loop (network
// order). IPv6 comes as each BSD numbers it (24, 28, 30).
func (g *pktgen) null() ([]byte, int) {
	var b []byte
	var h int
	var af uint32
	switch r := g.rng.IntN(20); {
	case r == 0:
		b, h = g.ip4()
		af = 7 // no family libpcap knows
	case r == 1:
		b, h = g.ip6()
		af = 2 // the IPv4 family before an IPv6 header
	case r < 10:
		b, h = g.ip4()
		af = 2
	default:
		b, h = g.ip6()
		af = pick(g.rng, []uint32{24, 28, 30})
	}
	hdr := make([]byte, 4)
	if g.c.Link.Type == 108 || g.c.Link.BigEndian {
		binary.BigEndian.PutUint32(hdr, af)
	} else {
		binary.LittleEndian.PutUint32(hdr, af)
	}
	return append(hdr, b...), 4 + h
}

// wlan: an 802.11 data frame (plain or QoS, any To/From DS) with LLC
// SNAP, or a beacon, or an ACK.
func (g *pktgen) wlan() ([]byte, int) {
	switch g.rng.IntN(10) {
	case 0: // ACK: control, 10 bytes
		f := append([]byte{0xd4, 0, 0, 0}, g.macPick()...)
		return f, len(f)
	case 1: // beacon: management
		f := append([]byte{0x80, 0, 0, 0}, g.macPick()...)
		f = append(f, g.macPick()...)
		f = append(f, g.macPick()...)
		f = append(f, 0x10, 0)
		return append(f, make([]byte, 12)...), len(f) + 12
	}
	fc := []byte{0x08, byte(g.rng.IntN(3))} // data; none, To DS or From DS
	qos := g.rng.IntN(3) == 0
	if qos {
		fc[0] = 0x88
	}
	f := append(fc, 0, 0)
	f = append(f, g.macPick()...)
	f = append(f, g.macPick()...)
	f = append(f, g.macPick()...)
	f = append(f, 0x20, 0)
	if qos {
		f = append(f, 0, 0)
	}
	b, h, et := g.l3(true)
	f = append(f, 0xaa, 0xaa, 0x03, 0, 0, 0)
	f = binary.BigEndian.AppendUint16(f, et)
	return append(f, b...), len(f) + h
}

// from picks from pool, or one time in two hundred from rare.
func from[T any](g *pktgen, pool, rare []T) T {
	if g.rng.IntN(200) == 0 {
		return pick(g.rng, rare)
	}
	return pick(g.rng, pool)
}

func (g *pktgen) addr4() []byte {
	a := from(g, pool4, rare4)
	note(&g.c.Addrs4, a)
	ip := netip.MustParseAddr(a).As4()
	return ip[:]
}

func (g *pktgen) addr6() []byte {
	a := from(g, pool6, rare6)
	note(&g.c.Addrs6, a)
	ip := netip.MustParseAddr(a).As16()
	return ip[:]
}

func (g *pktgen) arp() []byte {
	b := []byte{0, 1, 8, 0, 6, 4, 0, byte(1 + g.rng.IntN(2))}
	b = append(b, g.macPick()...)
	b = append(b, g.addr4()...)
	b = append(b, g.macPick()...)
	return append(b, g.addr4()...)
}

// ip4: an IPv4 packet, with options now and then, a fragment now and
// then (a later one carries no transport header), a header length
// below 5 one time in forty.
func (g *pktgen) ip4() ([]byte, int) {
	proto, l4, l4h := g.l4(false)
	opts := 0
	if g.rng.IntN(8) == 0 {
		opts = 1 + g.rng.IntN(10)
	}
	h := make([]byte, 20, 20+4*opts+len(l4))
	ihl := 5 + opts
	h[0] = 0x40 | byte(ihl)
	h[1] = byte(g.rng.IntN(4)) << 2
	binary.BigEndian.PutUint16(h[4:], uint16(g.rng.IntN(65536)))
	h[8] = 64
	h[9] = byte(proto)
	copy(h[12:], g.addr4())
	copy(h[16:], g.addr4())
	for i := range 4 * opts {
		h = append(h, 1) // NOP
		if i == 4*opts-1 {
			h[len(h)-1] = 0 // EOL
		}
	}
	switch r := g.rng.IntN(20); {
	case r == 0: // first fragment
		binary.BigEndian.PutUint16(h[6:], 0x2000)
	case r == 1: // a later fragment: the transport header is elsewhere
		binary.BigEndian.PutUint16(h[6:], uint16(1+g.rng.IntN(100))|uint16(g.rng.IntN(2))<<13)
		l4h = 0
	case r == 2:
		binary.BigEndian.PutUint16(h[6:], 0x4000) // DF
	}
	if g.rng.IntN(40) == 0 {
		h[0] = 0x40 | byte(g.rng.IntN(5))
	}
	binary.BigEndian.PutUint16(h[2:], uint16(len(h)+len(l4)))
	return append(h, l4...), len(h) + l4h
}

// ip6: an IPv6 packet, with up to three extension headers before the
// transport one; a fragment header with an offset hides the transport
// header.
func (g *pktgen) ip6() ([]byte, int) {
	proto, l4, l4h := g.l4(true)
	var exts []byte
	next := byte(proto)
	for range g.rng.IntN(4) {
		t := pick(g.rng, []byte{0, 43, 44, 60})
		var e []byte
		if t == 44 {
			off := uint16(0)
			if g.rng.IntN(2) == 0 {
				off = uint16(1+g.rng.IntN(100)) << 3
				l4h = 0
			}
			e = []byte{next, 0, 0, 0, 0, 0, 0, byte(g.rng.IntN(256))}
			binary.BigEndian.PutUint16(e[2:], off|uint16(g.rng.IntN(2)))
		} else {
			n := g.rng.IntN(2)
			e = make([]byte, 8*(n+1))
			e[0], e[1] = next, byte(n)
			if t == 43 {
				e[2] = 0 // routing type 0
			} else {
				e[2] = 1 // PadN
				e[3] = byte(len(e) - 4)
			}
		}
		exts = append(e, exts...)
		next = t
	}
	h := make([]byte, 40, 40+len(exts)+len(l4))
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(exts)+len(l4)))
	h[6] = next
	h[7] = 64
	copy(h[8:], g.addr6())
	copy(h[24:], g.addr6())
	h = append(h, exts...)
	return append(h, l4...), len(h) + l4h
}

func (g *pktgen) port() uint16 {
	p := from(g, poolP, rareP)
	note(&g.c.Ports, p)
	return uint16(p)
}

func (g *pktgen) payload() []byte {
	n := g.rng.IntN(120)
	if g.rng.IntN(10) == 0 {
		n = 200 + g.rng.IntN(1200)
	}
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return b
}

// l4 returns a transport (or tunnelled) packet, its IP protocol number
// and its header length. Tunnels nest once.
func (g *pktgen) l4(v6 bool) (int, []byte, int) {
	kinds := []int{6, 6, 17, 17, 1, 132, 47, 4, 41, 2, 99}
	if v6 {
		kinds = []int{6, 6, 17, 17, 58, 132, 47, 4, 41, 99}
	}
	proto := pick(g.rng, kinds)
	note(&g.c.Protos, proto)
	var h []byte
	switch proto {
	case 6:
		off := 5 + g.rng.IntN(2)
		h = make([]byte, 4*off)
		binary.BigEndian.PutUint16(h[0:], g.port())
		binary.BigEndian.PutUint16(h[2:], g.port())
		binary.BigEndian.PutUint32(h[4:], g.rng.Uint32())
		h[12] = byte(off) << 4
		h[13] = pick(g.rng, []byte{0x02, 0x12, 0x10, 0x11, 0x04, 0x18, 0x29})
	case 17:
		h = make([]byte, 8)
		binary.BigEndian.PutUint16(h[0:], g.port())
		binary.BigEndian.PutUint16(h[2:], g.port())
	case 1, 58:
		h = []byte{pick(g.rng, []byte{0, 3, 8, 11, 128, 129, 135}), byte(g.rng.IntN(2)), 0, 0, 0, 1, 0, 1}
	case 132:
		h = make([]byte, 12)
		binary.BigEndian.PutUint16(h[0:], g.port())
		binary.BigEndian.PutUint16(h[2:], g.port())
	case 2:
		h = []byte{0x16, 0, 0, 0, 224, 0, 0, 251}
	case 47, 4, 41:
		if g.rng.IntN(3) == 0 {
			proto = 99 // keep nesting shallow: no tunnel in a tunnel
			return proto, g.payload(), 0
		}
		var in []byte
		var ih int
		inner6 := proto == 41 || (proto == 47 && g.rng.IntN(2) == 0)
		if inner6 {
			in, ih = g.ip6()
		} else {
			in, ih = g.ip4()
		}
		if proto == 47 {
			et := uint16(etherIPv4)
			if inner6 {
				et = etherIPv6
			}
			gre := binary.BigEndian.AppendUint16([]byte{0, 0}, et)
			return proto, append(gre, in...), 4 + ih
		}
		return proto, in, ih
	default:
		return proto, g.payload(), 0
	}
	b := append(h, g.payload()...)
	if proto == 17 {
		binary.BigEndian.PutUint16(b[4:], uint16(len(b)))
	}
	return proto, b, len(h)
}
