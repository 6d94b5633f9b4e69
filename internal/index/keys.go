package index

import (
	"encoding/binary"
	"net/netip"
)

// Link types whose packets are parsed for keys (LINKTYPE_ values of
// pcapng). Packets of other link types count only for time.
const (
	linkNull     = 0
	linkEthernet = 1
	linkRaw      = 101
	linkRawAlt   = 12 // DLT_RAW on some BSDs
	linkLoop     = 108
	linkSLL      = 113
	linkIPv4     = 228
	linkIPv6     = 229
	linkSLL2     = 276
)

// Kinds of keys; each kind is hashed apart so that a port never
// matches a protocol number of the same value.
const (
	kindAddr4 uint64 = 1 << 56
	kindAddr6 uint64 = 2 << 56
	kindPort  uint64 = 3 << 56
	kindProto uint64 = 4 << 56
)

// mix is the splitmix64 finalizer: a cheap 64-bit hash of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func addr4Key(a uint32) uint64 { return mix(kindAddr4 | uint64(a)) }

func addr6Key(hi, lo uint64) uint64 { return mix(mix(hi^kindAddr6) ^ lo) }

func portKey(p uint16) uint64 { return mix(kindPort | uint64(p)) }

func protoKey(p uint8) uint64 { return mix(kindProto | uint64(p)) }

// addrKey is the key of a; an IPv4-mapped IPv6 address is taken as the
// IPv4 address it maps.
func addrKey(a netip.Addr) uint64 {
	a = a.Unmap()
	if a.Is4() {
		b := a.As4()
		return addr4Key(binary.BigEndian.Uint32(b[:]))
	}
	b := a.As16()
	return addr6Key(binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:]))
}

// keySink receives the keys of a packet.
type keySink interface{ add(k uint64) }

// packetKeys adds to s the keys of one packet captured with link type
// lt: every field libpcap's host, port and protocol primitives can
// match, read as libpcap reads it, so that the keys of a block are
// never narrower than what a filter selects (docs/index.md, "Never
// narrower than libpcap"):
//
//   - the network layer by the link header's type field, as libpcap
//     decides it (Ethernet's ethertype at offset 12, Linux cooked v1's
//     at 14 and v2's at 0, the address family of BSD loopback in either
//     byte order, the version nibble of raw IP), never by the IP
//     header's own version: ethertype 0x0800 is IPv4 whatever its
//     version nibble says, 0x86dd IPv6;
//   - each field whose bytes were captured, on its own: an IPv4 source
//     address with the destination cut off, a TCP source port without
//     its destination port;
//   - IPv4 ports where libpcap looks for them: after ip[0]&0xf 32-bit
//     words, whatever that header length (under 5 included), in a
//     packet whose fragment offset is 0;
//   - IPv6: the next header of the fixed header, the one after a
//     fragment header that follows it (ip6[40]), the ports at ip6[40]
//     and ip6[42] when the fixed header's next header is TCP, UDP or
//     SCTP, and, beyond what libpcap reads, the protocol and ports
//     after the hop-by-hop, routing, fragment, destination-options and
//     authentication headers;
//   - ARP and RARP: the IPv4 addresses arpKeys reads.
//
// Ethernet frames with up to three VLAN tags are also keyed by what
// they carry (libpcap looks inside only when the filter says vlan).
// A packet of a link type not listed marks the block as matching
// every key (keySet.wild). It reads only headers and does not
// allocate.
func packetKeys(s *keySet, lt uint32, p []byte) {
	var et uint16
	switch lt {
	case linkEthernet:
		if len(p) < 14 {
			return
		}
		et, p = binary.BigEndian.Uint16(p[12:]), p[14:]
		for i := 0; i < 3 && (et == 0x8100 || et == 0x88a8 || et == 0x9100); i++ {
			if len(p) < 4 {
				return
			}
			et, p = binary.BigEndian.Uint16(p[2:]), p[4:]
		}
	case linkRaw, linkRawAlt:
		if len(p) < 1 {
			return
		}
		switch p[0] >> 4 {
		case 4:
			et = 0x0800
		case 6:
			et = 0x86dd
		}
	case linkIPv4:
		et = 0x0800
	case linkIPv6:
		et = 0x86dd
	case linkSLL:
		if len(p) < 16 {
			return
		}
		et, p = binary.BigEndian.Uint16(p[14:]), p[16:]
	case linkSLL2:
		if len(p) < 20 {
			return
		}
		et, p = binary.BigEndian.Uint16(p[0:]), p[20:]
	case linkNull, linkLoop:
		if len(p) < 4 {
			return
		}
		et = loopType(binary.LittleEndian.Uint32(p))
		if et == 0 {
			et = loopType(binary.BigEndian.Uint32(p))
		}
		p = p[4:]
	default:
		s.wild = true
		return
	}
	switch et {
	case 0x0800:
		ipv4Keys(s, p)
	case 0x86dd:
		ipv6Keys(s, p)
	case 0x0806, 0x8035: // ARP, RARP
		arpKeys(s, p)
	}
}

// loopType is the ethertype of a BSD loopback address family: IPv4, or
// IPv6 as any system numbers it; 0 for anything else.
func loopType(fam uint32) uint16 {
	switch fam {
	case 2:
		return 0x0800
	case 10, 24, 28, 30:
		return 0x86dd
	}
	return 0
}

// arpKeys adds the IPv4 addresses an ARP or RARP packet names where
// libpcap's "host A" looks for them: the 4 bytes at offset 14 (the
// sender's protocol address of an Ethernet/IPv4 ARP) and at offset 24
// (the target's), whatever the hardware and protocol types say, so
// that the index holds every address such a filter can match.
func arpKeys(s *keySet, p []byte) {
	s.last = flow{}
	if len(p) >= 18 {
		s.add(addr4Key(binary.BigEndian.Uint32(p[14:])))
	}
	if len(p) >= 28 {
		s.add(addr4Key(binary.BigEndian.Uint32(p[24:])))
	}
}

// ipv4Keys adds the keys of an IPv4 header at p as libpcap reads it:
// whatever its version nibble, ports at the offset its header length
// says (0 to 60 bytes), each field that was captured.
func ipv4Keys(s *keySet, p []byte) {
	be := binary.BigEndian
	if len(p) < 20 {
		ipv4Cut(s, p)
		return
	}
	proto := p[9]
	ihl := int(p[0]&0x0f) * 4
	ports := (proto == 6 || proto == 17 || proto == 132) && be.Uint16(p[6:])&0x1fff == 0 // else a later fragment
	// The packet before was of the same flow, most often: its keys are
	// in the set already.
	t := flow{a: be.Uint64(p[12:]), proto: uint32(proto) | 4<<8}
	if ports && len(p) >= ihl+4 {
		t.ports = be.Uint32(p[ihl:])
		t.proto |= 1 << 16
	} else if ports && len(p) >= ihl+2 {
		s.add(portKey(be.Uint16(p[ihl:]))) // the destination port cut off
	}
	if s.last == t {
		return
	}
	s.last = t
	s.add(addr4Key(uint32(t.a >> 32)))
	s.add(addr4Key(uint32(t.a)))
	s.add(protoKey(proto))
	if t.proto&(1<<16) != 0 {
		s.add(portKey(uint16(t.ports >> 16)))
		s.add(portKey(uint16(t.ports)))
	}
}

// ipv4Cut adds the keys of an IPv4 header cut short of its addresses:
// the protocol, the source address and the ports libpcap can still
// read (a header length under 5 puts them inside the header).
func ipv4Cut(s *keySet, p []byte) {
	be := binary.BigEndian
	if len(p) < 10 {
		return
	}
	proto := p[9]
	s.add(protoKey(proto))
	if len(p) >= 16 {
		s.add(addr4Key(be.Uint32(p[12:])))
	}
	ihl := int(p[0]&0x0f) * 4
	if (proto == 6 || proto == 17 || proto == 132) && be.Uint16(p[6:])&0x1fff == 0 {
		if len(p) >= ihl+2 {
			s.add(portKey(be.Uint16(p[ihl:])))
		}
		if len(p) >= ihl+4 {
			s.add(portKey(be.Uint16(p[ihl+2:])))
		}
	}
}

// flow is what the keys of an IPv4 packet come from (IPv6 packets are
// not cached), so that a run of packets of one flow is hashed once.
type flow struct {
	a     uint64 // source and destination address
	ports uint32 // source and destination port, if any
	proto uint32 // protocol | 4<<8 | 1<<16 if ports are set; 0: no flow
}

// ipv6Keys adds the keys of an IPv6 header at p: what libpcap reads
// (whatever the version nibble; each field that was captured), then
// the protocol and ports after the extension headers.
func ipv6Keys(s *keySet, p []byte) {
	be := binary.BigEndian
	if len(p) < 40 {
		if len(p) >= 7 {
			s.add(protoKey(p[6]))
		}
		if len(p) >= 24 {
			s.add(addr6Key(be.Uint64(p[8:]), be.Uint64(p[16:])))
		}
		return
	}
	s.add(addr6Key(be.Uint64(p[8:]), be.Uint64(p[16:])))
	s.add(addr6Key(be.Uint64(p[24:]), be.Uint64(p[32:])))
	next := p[6]
	switch next {
	case 6, 17, 132:
		// libpcap's ports, and the walk's: at ip6[40].
	case 44:
		s.add(protoKey(next))
		if len(p) >= 41 {
			s.add(protoKey(p[40])) // libpcap's "ip6 proto N" looks past a fragment header
		}
	default:
		s.add(protoKey(next))
	}
	p = p[40:]
	for range 8 {
		switch next {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if len(p) < 8 {
				s.add(protoKey(next))
				return
			}
			n := (int(p[1]) + 1) * 8
			if len(p) < n {
				s.add(protoKey(next))
				return
			}
			next, p = p[0], p[n:]
			continue
		case 44: // fragment
			if len(p) < 8 {
				s.add(protoKey(next))
				return
			}
			if be.Uint16(p[2:])>>3 != 0 {
				s.add(protoKey(p[0]))
				return // a later fragment
			}
			next, p = p[0], p[8:]
			continue
		case 51: // authentication header
			if len(p) < 8 {
				s.add(protoKey(next))
				return
			}
			n := (int(p[1]) + 2) * 4
			if len(p) < n {
				s.add(protoKey(next))
				return
			}
			next, p = p[0], p[n:]
			continue
		}
		break
	}
	s.add(protoKey(next))
	portKeys(s, next, p)
}

// portKeys adds the ports of a TCP, UDP or SCTP header at p, each if
// it was captured.
func portKeys(s *keySet, proto uint8, p []byte) {
	if proto == 6 || proto == 17 || proto == 132 {
		if len(p) >= 2 {
			s.add(portKey(binary.BigEndian.Uint16(p)))
		}
		if len(p) >= 4 {
			s.add(portKey(binary.BigEndian.Uint16(p[2:])))
		}
	}
}

// keySet is a set of key hashes, an open-addressing table reused from
// block to block: it allocates only when a block holds more distinct
// keys than any block before.
type keySet struct {
	slots []uint64 // 0: empty; a key hashing to 0 is stored as 1
	n     int
	last  flow // of the last IPv4 packet added; zero after reset
	// wild: a packet of a link type packetKeys does not read was
	// added; the block's filter matches every key.
	wild bool
}

func (s *keySet) add(k uint64) {
	if k == 0 {
		k = 1
	}
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	mask := uint64(len(s.slots) - 1)
	for i := k & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case k:
			return
		case 0:
			s.slots[i] = k
			s.n++
			return
		}
	}
}

func (s *keySet) grow() {
	old := s.slots
	s.slots = make([]uint64, max(1024, 2*len(old)))
	s.n = 0
	for _, k := range old {
		if k != 0 {
			s.add(k)
		}
	}
}

func (s *keySet) reset() {
	if s.n > 0 {
		clear(s.slots)
		s.n = 0
	}
	s.last = flow{}
	s.wild = false
}
