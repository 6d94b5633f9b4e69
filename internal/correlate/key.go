package correlate

import (
	"encoding/binary"
	"hash/maphash"
)

// Link types KeyOf understands (LINKTYPE_* values).
const (
	linkNull     = 0   // BSD loopback: 4-byte address family, host order
	linkEthernet = 1   // Ethernet, 802.1Q / 802.1ad tags skipped
	linkRaw      = 101 // IPv4 or IPv6 by the version nibble
	linkLoop     = 108 // OpenBSD loopback: 4-byte address family, network order
	linkSLL      = 113 // Linux cooked capture v1
	linkIPv4     = 228
	linkIPv6     = 229
	linkSLL2     = 276 // Linux cooked capture v2
)

// EtherTypes.
const (
	etherIPv4  = 0x0800
	etherIPv6  = 0x86dd
	etherVLAN  = 0x8100
	etherQinQ  = 0x88a8
	etherQinQ2 = 0x9100
)

// IP protocols.
const (
	protoICMP    = 1
	protoTCP     = 6
	protoUDP     = 17
	protoICMPv6  = 58
	protoDCCP    = 33
	protoSCTP    = 132
	protoUDPLite = 136
)

// Key identifies a packet by what a router or switch on its way does not
// change: for IP, the addresses, the protocol, the IPv4 identification
// (or the IPv6 fragment header's), the fragment offset and more-fragments
// flag, the ports (TCP, UDP, UDP-Lite, DCCP, SCTP), TCP sequence and
// acknowledgement numbers, ICMP / ICMPv6 type, code, and echo identifier
// and sequence, the L4 payload's length by the IP header and a hash of
// its captured bytes. It leaves out the link-layer header (MAC addresses,
// VLAN tags), TTL / hop limit, DSCP and ECN, the IPv6 flow label and
// extension headers but the fragment header, checksums, TCP flags,
// window and options, and Ethernet padding.
//
// A packet that is not IP is keyed by its EtherType (or link type), its
// length after the link-layer header and a hash of those bytes. A packet
// cut short by the snap length keys on the bytes captured: the capture
// points to correlate should use the same snap length.
//
// Key is comparable: use it as a map key. The zero Key is no packet's.
type Key struct {
	Src, Dst [16]byte // IPv4 addresses in the first 4 bytes
	Version  uint8    // 4 or 6; 0: not IP
	Proto    uint8    // IP protocol of the L4 header (after IPv6 extension headers)
	Type     uint16   // not IP: the EtherType, or the link type with bit 15 set when the L3 protocol is unknown
	Frag     uint16   // fragment offset (8-byte units) << 1 | more-fragments flag
	ID       uint32   // IPv4 identification, or the IPv6 fragment header's
	SrcPort  uint16   // ICMP: type << 8 | code
	DstPort  uint16   // ICMP echo: the identifier
	Seq, Ack uint32   // TCP; ICMP echo: Seq is the sequence number
	Len      uint32   // length of the L4 payload (of a fragment: its data) by the IP header
	Hash     uint64   // of the captured bytes of that payload
}

// hasher hashes payloads. Keys are compared within one process only, so
// a per-process random seed is fine.
type hasher struct{ seed maphash.Seed }

func newHasher() hasher { return hasher{maphash.MakeSeed()} }

// KeyOf returns the key of a packet of linkType whose captured bytes are
// data. It reads data only and does not allocate.
func (h hasher) KeyOf(linkType uint16, data []byte) Key {
	var k Key
	et, l3, ok := l3Of(linkType, data)
	if !ok {
		k.Type = 0x8000 | linkType
		k.Len = uint32(len(data))
		k.Hash = maphash.Bytes(h.seed, data)
		return k
	}
	switch {
	case et == etherIPv4 && len(l3) >= 20 && l3[0]>>4 == 4:
		h.ipv4(&k, l3)
	case et == etherIPv6 && len(l3) >= 40 && l3[0]>>4 == 6:
		h.ipv6(&k, l3)
	default:
		k.Type = et
		k.Len = uint32(len(l3))
		k.Hash = maphash.Bytes(h.seed, l3)
	}
	return k
}

// l3Of strips the link-layer header: the EtherType of what follows and
// its bytes; ok false for a link type or frame it cannot read.
func l3Of(linkType uint16, b []byte) (et uint16, l3 []byte, ok bool) {
	switch linkType {
	case linkEthernet:
		if len(b) < 14 {
			return 0, nil, false
		}
		et, b = binary.BigEndian.Uint16(b[12:]), b[14:]
		for (et == etherVLAN || et == etherQinQ || et == etherQinQ2) && len(b) >= 4 {
			et, b = binary.BigEndian.Uint16(b[2:]), b[4:]
		}
		return et, b, true
	case linkSLL:
		if len(b) < 16 {
			return 0, nil, false
		}
		return binary.BigEndian.Uint16(b[14:]), b[16:], true
	case linkSLL2:
		if len(b) < 20 {
			return 0, nil, false
		}
		return binary.BigEndian.Uint16(b[0:]), b[20:], true
	case linkRaw:
		if len(b) == 0 {
			return 0, nil, false
		}
		switch b[0] >> 4 {
		case 4:
			return etherIPv4, b, true
		case 6:
			return etherIPv6, b, true
		}
		return 0, nil, false
	case linkIPv4:
		return etherIPv4, b, true
	case linkIPv6:
		return etherIPv6, b, true
	case linkNull, linkLoop:
		if len(b) < 4 {
			return 0, nil, false
		}
		fam := binary.BigEndian.Uint32(b)
		if linkType == linkNull && fam > 0xffff {
			fam = binary.LittleEndian.Uint32(b)
		}
		switch fam {
		case 2:
			return etherIPv4, b[4:], true
		case 10, 24, 28, 30: // AF_INET6 of Linux, the BSDs, macOS
			return etherIPv6, b[4:], true
		}
		return 0, nil, false
	}
	return 0, nil, false
}

// ipv4 fills k from an IPv4 header (at least 20 bytes).
func (h hasher) ipv4(k *Key, b []byte) {
	k.Version = 4
	copy(k.Src[:4], b[12:16])
	copy(k.Dst[:4], b[16:20])
	k.Proto = b[9]
	k.ID = uint32(binary.BigEndian.Uint16(b[4:]))
	ff := binary.BigEndian.Uint16(b[6:])
	off := ff & 0x1fff
	k.Frag = off<<1 | ff>>13&1
	ihl := int(b[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < 20 || total < ihl {
		k.Len = uint32(len(b))
		k.Hash = maphash.Bytes(h.seed, b[min(20, len(b)):])
		return
	}
	l4 := clip(b, ihl, total)
	h.l4(k, l4, total-ihl, off == 0)
}

// ipv6 fills k from an IPv6 header (at least 40 bytes), walking the
// extension headers to the L4 header.
func (h hasher) ipv6(k *Key, b []byte) {
	k.Version = 6
	copy(k.Src[:], b[8:24])
	copy(k.Dst[:], b[24:40])
	plen := int(binary.BigEndian.Uint16(b[4:]))
	if plen == 0 { // a jumbogram, or a TSO frame: the captured bytes
		plen = len(b) - 40
	}
	end := 40 + plen
	next, at := b[6], 40
	first := true
walk:
	for at < end {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(b) < at+2 {
				break walk
			}
			next, at = b[at], at+(int(b[at+1])+1)*8
		case 51: // authentication header
			if len(b) < at+2 {
				break walk
			}
			next, at = b[at], at+(int(b[at+1])+2)*4
		case 44: // fragment
			if len(b) < at+8 {
				break walk
			}
			fo := binary.BigEndian.Uint16(b[at+2:])
			k.Frag = fo>>3<<1 | fo&1
			k.ID = binary.BigEndian.Uint32(b[at+4:])
			first = fo>>3 == 0
			next, at = b[at], at+8
		default:
			break walk
		}
	}
	k.Proto = next
	at = min(at, end)
	h.l4(k, clip(b, at, end), end-at, first)
}

// clip is b[from:to] cut to the bytes captured.
func clip(b []byte, from, to int) []byte {
	to = min(to, len(b))
	if from >= to {
		return nil
	}
	return b[from:to]
}

// l4 fills k's L4 fields from the L4 bytes captured b (of length n by
// the IP header); a fragment but the first (first false) has no L4
// header and is keyed by its data.
func (h hasher) l4(k *Key, b []byte, n int, first bool) {
	hdr := 0
	if first {
		switch k.Proto {
		case protoTCP:
			if len(b) >= 20 {
				k.SrcPort = binary.BigEndian.Uint16(b[0:])
				k.DstPort = binary.BigEndian.Uint16(b[2:])
				k.Seq = binary.BigEndian.Uint32(b[4:])
				k.Ack = binary.BigEndian.Uint32(b[8:])
				hdr = max(int(b[12]>>4)*4, 20)
			}
		case protoUDP, protoUDPLite, protoDCCP, protoSCTP:
			if len(b) >= 8 {
				k.SrcPort = binary.BigEndian.Uint16(b[0:])
				k.DstPort = binary.BigEndian.Uint16(b[2:])
				hdr = 8 // UDP's header; DCCP's checksum is in its first 8 bytes too
				if k.Proto == protoSCTP {
					hdr = 12 // ports, verification tag, checksum
				}
			}
		case protoICMP, protoICMPv6:
			if len(b) >= 8 {
				k.SrcPort = uint16(b[0])<<8 | uint16(b[1])
				if echo(k.Proto, b[0]) {
					k.DstPort = binary.BigEndian.Uint16(b[4:])
					k.Seq = uint32(binary.BigEndian.Uint16(b[6:]))
					hdr = 8
				} else {
					hdr = 4 // type, code, checksum; the rest is the message
				}
			}
		}
	}
	hdr = min(hdr, n)
	k.Len = uint32(n - hdr)
	k.Hash = maphash.Bytes(h.seed, b[min(hdr, len(b)):])
}

// echo: an ICMP (4) or ICMPv6 echo request or reply, whose header holds
// an identifier and a sequence number.
func echo(proto, typ uint8) bool {
	if proto == protoICMP {
		return typ == 0 || typ == 8
	}
	return typ == 128 || typ == 129
}
