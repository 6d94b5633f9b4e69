package flow

import (
	"bytes"
	"encoding/binary"
	"net/netip"
)

// Link types whose packets are decoded (LINKTYPE_ values of pcapng): the
// ones internal/index keys. Packets of other link types are aggregated
// per interface into one flow of Kind KindNone.
const (
	LinkNull     = 0
	LinkEthernet = 1
	LinkRaw      = 101
	LinkRawAlt   = 12 // DLT_RAW on some BSDs
	LinkLoop     = 108
	LinkSLL      = 113
	LinkIPv4     = 228
	LinkIPv6     = 229
	LinkSLL2     = 276
)

// Ethertypes the decoder knows.
const (
	EtherIPv4  = 0x0800
	EtherIPv6  = 0x86dd
	etherVLAN  = 0x8100 // 802.1Q
	etherQinQ  = 0x88a8 // 802.1ad
	etherQinQ2 = 0x9100 // pre-standard QinQ
)

// IP protocol numbers with ports or port equivalents.
const (
	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
	ProtoSCTP   = 132
)

// Kind says what a Key's addresses are.
type Kind uint8

// Kinds of keys.
const (
	// KindNone: nothing could be decoded (a link type not read, a frame
	// cut inside its link header): one flow per interface (and
	// ethertype where one was read).
	KindNone Kind = iota
	// KindIPv4: Src and Dst hold IPv4 addresses in their first 4 bytes.
	KindIPv4
	// KindIPv6: Src and Dst hold IPv6 addresses.
	KindIPv6
	// KindLink: traffic that is not IP (ARP, LLDP, ...), or IP whose
	// header was cut before its addresses: Src and Dst hold the MAC
	// addresses in their first 6 bytes (Dst zero for Linux cooked
	// captures, which record only the source), EtherType says what it
	// carries.
	KindLink
)

func (k Kind) String() string {
	switch k {
	case KindIPv4:
		return "ip4"
	case KindIPv6:
		return "ip6"
	case KindLink:
		return "link"
	}
	return "none"
}

// Key flags.
const (
	// FlagPorts: SrcPort and DstPort hold ports (TCP, UDP, SCTP) or
	// ICMP port equivalents.
	FlagPorts uint8 = 1 << iota
	// FlagOneWay: an ICMP message without a counterpart (an error, a
	// redirect): the key is directional, as in Community ID and Zeek.
	FlagOneWay
	// FlagFragment: a later IP fragment (offset not 0), which holds no
	// transport header: the key has the addresses and protocol only.
	FlagFragment
	// FlagCut: the packet was captured too short for a field the key
	// would have held (ports, ICMP type): the key holds what was read.
	FlagCut
)

// MaxVLANs is the number of VLAN ids a key holds: the outer and the
// inner tag of QinQ. Further tags are skipped.
const MaxVLANs = 2

// Key identifies a flow: the interface, VLAN ids, what the packet
// carries and its two endpoints. Keys are comparable (map keys). In a
// Record the key is oriented initiator first (Src is the initiator);
// a Table looks flows up by the Canonical key.
//
// For ICMP and ICMPv6 the ports are the Community ID's port
// equivalents (Zeek's): a message with a counterpart (echo, timestamp,
// router and neighbour solicitation, ...) has SrcPort its type and
// DstPort the counterpart's type, so that request and reply make one
// flow; any other message has SrcPort its type and DstPort its code
// and is FlagOneWay.
type Key struct {
	Src, Dst  [16]byte // IPv4 (first 4 bytes), IPv6, or MAC (first 6 bytes)
	Iface     uint32   // the interface the packet was captured on
	VLAN      [MaxVLANs]uint16
	NVLAN     uint8  // VLAN ids held (0 to MaxVLANs)
	Kind      Kind   // what Src and Dst are
	Proto     uint8  // IP protocol (the last next header of IPv6)
	Flags     uint8  // FlagPorts, FlagOneWay, FlagFragment, FlagCut
	EtherType uint16 // EtherIPv4, EtherIPv6, or what a KindLink frame carries
	SrcPort   uint16
	DstPort   uint16
}

// SrcAddr returns the source IP address (the zero Addr for keys that
// are not IP).
func (k *Key) SrcAddr() netip.Addr { return k.addr(&k.Src) }

// DstAddr returns the destination IP address (the zero Addr for keys
// that are not IP).
func (k *Key) DstAddr() netip.Addr { return k.addr(&k.Dst) }

func (k *Key) addr(a *[16]byte) netip.Addr {
	switch k.Kind {
	case KindIPv4:
		return netip.AddrFrom4([4]byte(a[:4]))
	case KindIPv6:
		return netip.AddrFrom16(*a)
	}
	return netip.Addr{}
}

// addrLen is the bytes of Src and Dst the key uses.
func (k *Key) addrLen() int {
	switch k.Kind {
	case KindIPv4:
		return 4
	case KindIPv6:
		return 16
	case KindLink:
		return 6
	}
	return 0
}

// Reverse returns the key seen from the other side.
func (k Key) Reverse() Key {
	k.Src, k.Dst = k.Dst, k.Src
	k.SrcPort, k.DstPort = k.DstPort, k.SrcPort
	return k
}

// Canonical returns the key with the smaller endpoint first, as Community
// ID orders them (addresses compared as bytes, then ports when the
// addresses are equal), and whether that reversed k. A FlagOneWay key
// is never reversed.
func (k Key) Canonical() (Key, bool) {
	if k.ordered() {
		return k, false
	}
	return k.Reverse(), true
}

// ordered reports whether k's endpoints are in Community ID order.
func (k *Key) ordered() bool {
	if k.Flags&FlagOneWay != 0 {
		return true
	}
	n := k.addrLen()
	switch c := bytes.Compare(k.Src[:n], k.Dst[:n]); {
	case c < 0:
		return true
	case c > 0:
		return false
	}
	return k.Flags&FlagPorts != 0 && k.SrcPort < k.DstPort
}

// Packet is what Decode reads of one packet besides its key.
type Packet struct {
	// TCPFlags are the flags byte of a TCP header (FIN 0x01, SYN 0x02,
	// RST 0x04, PSH 0x08, ACK 0x10, URG 0x20, ECE 0x40, CWR 0x80); 0
	// for other packets.
	TCPFlags uint8
	// TCP: the packet has a TCP header with its flags.
	TCP bool
}

// TCP flags.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPAck = 0x10
)

// Decode sets k to the key of one packet captured with link type
// linkType (data: its captured bytes) on interface iface, oriented as
// the packet travels (Src its sender), and returns what else it read.
// It reads headers only, never panics on any bytes, and does not
// allocate; what it cannot read it leaves out of the key (FlagCut,
// docs/flows.md "Keys").
func Decode(k *Key, linkType uint32, iface uint32, data []byte) Packet {
	*k = Key{Iface: iface}
	var et uint16
	p := data
	switch linkType {
	case LinkEthernet:
		if len(p) < 14 {
			return Packet{}
		}
		k.Kind = KindLink
		copy(k.Dst[:6], p[0:6])
		copy(k.Src[:6], p[6:12])
		et, p = binary.BigEndian.Uint16(p[12:]), p[14:]
		for et == etherVLAN || et == etherQinQ || et == etherQinQ2 {
			if len(p) < 4 {
				k.EtherType = et
				k.Flags |= FlagCut
				return Packet{}
			}
			if k.NVLAN < MaxVLANs {
				k.VLAN[k.NVLAN] = binary.BigEndian.Uint16(p) & 0x0fff
				k.NVLAN++
			}
			et, p = binary.BigEndian.Uint16(p[2:]), p[4:]
		}
	case LinkSLL:
		if len(p) < 16 {
			return Packet{}
		}
		k.Kind = KindLink
		if n := int(binary.BigEndian.Uint16(p[4:])); n > 0 {
			copy(k.Src[:6], p[6:6+min(n, 6)])
		}
		et, p = binary.BigEndian.Uint16(p[14:]), p[16:]
	case LinkSLL2:
		if len(p) < 20 {
			return Packet{}
		}
		k.Kind = KindLink
		if n := int(p[11]); n > 0 {
			copy(k.Src[:6], p[12:12+min(n, 6)])
		}
		et, p = binary.BigEndian.Uint16(p[0:]), p[20:]
	case LinkRaw, LinkRawAlt:
		if len(p) < 1 {
			return Packet{}
		}
		switch p[0] >> 4 {
		case 4:
			et = EtherIPv4
		case 6:
			et = EtherIPv6
		default:
			return Packet{}
		}
	case LinkIPv4:
		et = EtherIPv4
	case LinkIPv6:
		et = EtherIPv6
	case LinkNull, LinkLoop:
		if len(p) < 4 {
			return Packet{}
		}
		et = loopType(binary.LittleEndian.Uint32(p))
		if et == 0 {
			et = loopType(binary.BigEndian.Uint32(p))
		}
		if et == 0 {
			return Packet{}
		}
		p = p[4:]
	default:
		return Packet{}
	}
	k.EtherType = et
	switch et {
	case EtherIPv4:
		return decodeIPv4(k, p)
	case EtherIPv6:
		return decodeIPv6(k, p)
	}
	return Packet{}
}

// loopType is the ethertype of a BSD loopback address family: IPv4, or
// IPv6 as any system numbers it; 0 for anything else.
func loopType(fam uint32) uint16 {
	switch fam {
	case 2:
		return EtherIPv4
	case 10, 24, 28, 30:
		return EtherIPv6
	}
	return 0
}

// decodeIPv4 reads an IPv4 header at p. A header cut before its
// addresses, or with a header length under 5 words, leaves the key at
// the link level (FlagCut).
func decodeIPv4(k *Key, p []byte) Packet {
	if len(p) < 20 || p[0]>>4 != 4 {
		k.Flags |= FlagCut
		return Packet{}
	}
	ihl := int(p[0]&0x0f) * 4
	if ihl < 20 {
		k.Flags |= FlagCut
		return Packet{}
	}
	ipKey(k, KindIPv4, p[12:16], p[16:20], p[9])
	if binary.BigEndian.Uint16(p[6:])&0x1fff != 0 {
		k.Flags |= FlagFragment
		return Packet{}
	}
	if len(p) < ihl {
		k.Flags |= FlagCut
		return Packet{}
	}
	return transport(k, p[ihl:])
}

// ipKey sets the network level of k, replacing its link addresses.
func ipKey(k *Key, kind Kind, src, dst []byte, proto uint8) {
	k.Kind = kind
	k.Src, k.Dst = [16]byte{}, [16]byte{}
	copy(k.Src[:], src)
	copy(k.Dst[:], dst)
	k.Proto = proto
}

// decodeIPv6 reads an IPv6 header at p and its extension headers
// (hop-by-hop, routing, fragment, destination options, authentication;
// at most 8) up to the transport header.
func decodeIPv6(k *Key, p []byte) Packet {
	if len(p) < 40 || p[0]>>4 != 6 {
		k.Flags |= FlagCut
		return Packet{}
	}
	next := p[6]
	ipKey(k, KindIPv6, p[8:24], p[24:40], next)
	p = p[40:]
	for range 8 {
		var n int
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(p) < 8 {
				k.Flags |= FlagCut
				return Packet{}
			}
			n = (int(p[1]) + 1) * 8
		case 44: // fragment
			if len(p) < 8 {
				k.Flags |= FlagCut
				return Packet{}
			}
			if binary.BigEndian.Uint16(p[2:])>>3 != 0 {
				k.Proto = p[0]
				k.Flags |= FlagFragment
				return Packet{}
			}
			n = 8
		case 51: // authentication header
			if len(p) < 8 {
				k.Flags |= FlagCut
				return Packet{}
			}
			n = (int(p[1]) + 2) * 4
		default:
			k.Proto = next
			return transport(k, p)
		}
		if len(p) < n {
			k.Flags |= FlagCut
			return Packet{}
		}
		next, p = p[0], p[n:]
		k.Proto = next
	}
	// More than 8 extension headers: the protocol is the last read.
	return Packet{}
}

// transport reads the ports (or ICMP type and code) of the transport
// header at p for protocol k.Proto.
func transport(k *Key, p []byte) Packet {
	switch k.Proto {
	case ProtoTCP, ProtoUDP, ProtoSCTP:
		if len(p) < 4 {
			k.Flags |= FlagCut
			return Packet{}
		}
		k.SrcPort, k.DstPort = binary.BigEndian.Uint16(p), binary.BigEndian.Uint16(p[2:])
		k.Flags |= FlagPorts
		if k.Proto == ProtoTCP {
			if len(p) < 14 {
				k.Flags |= FlagCut
				return Packet{}
			}
			return Packet{TCPFlags: p[13], TCP: true}
		}
	case ProtoICMP, ProtoICMPv6:
		if len(p) < 2 {
			k.Flags |= FlagCut
			return Packet{}
		}
		var other uint8
		var two bool
		if k.Proto == ProtoICMP {
			other, two = icmpCounterpart(p[0])
		} else {
			other, two = icmp6Counterpart(p[0])
		}
		k.Flags |= FlagPorts
		k.SrcPort = uint16(p[0])
		if two {
			k.DstPort = uint16(other)
		} else {
			k.DstPort = uint16(p[1])
			k.Flags |= FlagOneWay
		}
	}
	return Packet{}
}

// icmpCounterpart returns the type of the ICMPv4 message that answers
// (or asks) t, as Zeek and Community ID pair them.
func icmpCounterpart(t uint8) (uint8, bool) {
	switch t {
	case 8:
		return 0, true // echo, echo reply
	case 0:
		return 8, true
	case 13:
		return 14, true // timestamp
	case 14:
		return 13, true
	case 15:
		return 16, true // information
	case 16:
		return 15, true
	case 10:
		return 9, true // router solicitation, advertisement
	case 9:
		return 10, true
	case 17:
		return 18, true // address mask
	case 18:
		return 17, true
	}
	return 0, false
}

// icmp6Counterpart is icmpCounterpart for ICMPv6.
func icmp6Counterpart(t uint8) (uint8, bool) {
	switch t {
	case 128, 130, 133, 135, 139, 144:
		// echo, MLD query, router and neighbour solicitation, who are
		// you, home agent address discovery
		return t + 1, true
	case 129, 131, 134, 136, 140, 145:
		return t - 1, true
	}
	return 0, false
}
