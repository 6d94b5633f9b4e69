package flow

import (
	"encoding/binary"
	"net/netip"
)

// pkt describes a test packet; frame builds its bytes.
type pkt struct {
	link         uint32 // 0 (Ethernet), LinkRaw, LinkSLL, LinkSLL2, testNull
	vlans        []uint16
	src, dst     netip.Addr
	proto        uint8
	sport, dport uint16 // ports, or ICMP type and code
	flags        uint8  // TCP flags
	seq, ack     uint32
	payload      int
	fragOff      uint16 // fragment offset in 8-byte units
	more         bool   // more fragments
	ipID         uint16
	ext6         []uint8 // IPv6 extension headers before the transport (0, 43, 60, 51, 44)
}

var (
	macA = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macB = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
)

// testNull stands for LinkNull in pkt.link, whose 0 means Ethernet.
const testNull = 1 << 20

// lt returns the packet's link type.
func (p pkt) lt() uint32 {
	switch p.link {
	case 0:
		return LinkEthernet
	case testNull:
		return LinkNull
	}
	return p.link
}

// frame returns the packet's bytes for its link type (Ethernet unless
// set).
func (p pkt) frame() []byte {
	l3 := p.ip()
	et := uint16(EtherIPv4)
	if p.src.Is6() {
		et = EtherIPv6
	}
	switch p.lt() {
	case LinkEthernet:
		b := append([]byte{}, macB[:]...)
		b = append(b, macA[:]...)
		for _, v := range p.vlans {
			b = binary.BigEndian.AppendUint16(b, etherVLAN)
			b = binary.BigEndian.AppendUint16(b, v)
		}
		b = binary.BigEndian.AppendUint16(b, et)
		return append(b, l3...)
	case LinkSLL:
		b := make([]byte, 16)
		binary.BigEndian.PutUint16(b[2:], 1)
		binary.BigEndian.PutUint16(b[4:], 6)
		copy(b[6:], macA[:])
		binary.BigEndian.PutUint16(b[14:], et)
		return append(b, l3...)
	case LinkSLL2:
		b := make([]byte, 20)
		binary.BigEndian.PutUint16(b[0:], et)
		b[11] = 6
		copy(b[12:], macA[:])
		return append(b, l3...)
	case LinkNull:
		b := make([]byte, 4)
		fam := uint32(2)
		if p.src.Is6() {
			fam = 30
		}
		binary.LittleEndian.PutUint32(b, fam)
		return append(b, l3...)
	}
	return l3
}

// l4 returns the transport header and payload.
func (p pkt) l4() []byte {
	var b []byte
	switch p.proto {
	case ProtoTCP:
		b = make([]byte, 20)
		binary.BigEndian.PutUint16(b[0:], p.sport)
		binary.BigEndian.PutUint16(b[2:], p.dport)
		binary.BigEndian.PutUint32(b[4:], p.seq)
		binary.BigEndian.PutUint32(b[8:], p.ack)
		b[12] = 5 << 4
		b[13] = p.flags
		binary.BigEndian.PutUint16(b[14:], 65535)
	case ProtoUDP:
		b = make([]byte, 8)
		binary.BigEndian.PutUint16(b[0:], p.sport)
		binary.BigEndian.PutUint16(b[2:], p.dport)
		binary.BigEndian.PutUint16(b[4:], uint16(8+p.payload))
	case ProtoSCTP:
		b = make([]byte, 12)
		binary.BigEndian.PutUint16(b[0:], p.sport)
		binary.BigEndian.PutUint16(b[2:], p.dport)
	case ProtoICMP, ProtoICMPv6:
		b = make([]byte, 8)
		b[0], b[1] = byte(p.sport), byte(p.dport)
		binary.BigEndian.PutUint16(b[4:], 0x1234)
	}
	for i := range p.payload {
		b = append(b, byte(i*7))
	}
	return b
}

func (p pkt) ip() []byte {
	l4 := p.l4()
	if p.src.Is4() {
		h := make([]byte, 20)
		h[0] = 0x45
		binary.BigEndian.PutUint16(h[2:], uint16(20+len(l4)))
		binary.BigEndian.PutUint16(h[4:], p.ipID)
		frag := p.fragOff & 0x1fff
		if p.more {
			frag |= 0x2000
		}
		binary.BigEndian.PutUint16(h[6:], frag)
		h[8] = 64
		h[9] = p.proto
		s, d := p.src.As4(), p.dst.As4()
		copy(h[12:], s[:])
		copy(h[16:], d[:])
		binary.BigEndian.PutUint16(h[10:], checksum(h))
		return append(h, l4...)
	}
	var ext []byte
	next := p.proto
	for i := len(p.ext6) - 1; i >= 0; i-- {
		var e []byte
		switch t := p.ext6[i]; t {
		case 44:
			e = make([]byte, 8)
			frag := p.fragOff << 3
			if p.more {
				frag |= 1
			}
			binary.BigEndian.PutUint16(e[2:], frag)
		case 51:
			e = make([]byte, 16)
			e[1] = 2 // (2+2)*4 = 16
		default:
			e = make([]byte, 16)
			e[1] = 1 // (1+1)*8 = 16
		}
		e[0] = next
		next = p.ext6[i]
		ext = append(e, ext...)
	}
	h := make([]byte, 40)
	h[0] = 0x60
	binary.BigEndian.PutUint16(h[4:], uint16(len(ext)+len(l4)))
	h[6] = next
	h[7] = 64
	s, d := p.src.As16(), p.dst.As16()
	copy(h[8:], s[:])
	copy(h[24:], d[:])
	h = append(h, ext...)
	return append(h, l4...)
}

func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
