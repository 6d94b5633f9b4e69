package flowquery

import (
	"encoding/binary"

	"github.com/pcapsync/pcapsync/internal/flow"
)

// Link types and ethertypes of the synthetic packet.
const (
	linkEthernet = 1
	etherVLAN    = 0x8100
)

// synthMAC are the MAC addresses of an IP flow's synthetic packet (the
// key does not keep them): locally administered, never broadcast.
var (
	synthSrcMAC = [6]byte{0x02, 0, 0, 0, 0, 0x01}
	synthDstMAC = [6]byte{0x02, 0, 0, 0, 0, 0x02}
)

// synth appends to dst the synthetic Ethernet frame of key k, sent by
// its Src (the initiator) to its Dst (doc.go, "Filter").
func synth(dst []byte, k *flow.Key) []byte {
	srcMAC, dstMAC := synthSrcMAC[:], synthDstMAC[:]
	if k.Kind == flow.KindLink {
		srcMAC, dstMAC = k.Src[:6], k.Dst[:6]
	}
	b := append(dst, dstMAC...)
	b = append(b, srcMAC...)
	for i := range int(k.NVLAN) {
		b = binary.BigEndian.AppendUint16(b, etherVLAN)
		b = binary.BigEndian.AppendUint16(b, k.VLAN[i]&0x0fff)
	}
	b = binary.BigEndian.AppendUint16(b, k.EtherType)
	switch k.Kind {
	case flow.KindIPv4:
		return synthIPv4(b, k)
	case flow.KindIPv6:
		return synthIPv6(b, k)
	}
	return b
}

func synthIPv4(b []byte, k *flow.Key) []byte {
	l4 := transport(k)
	h := len(b)
	b = append(b, make([]byte, 20)...)
	ip := b[h:]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+l4))
	if k.Flags&flow.FlagFragment != 0 {
		binary.BigEndian.PutUint16(ip[6:], 1) // a later fragment: offset 8
	}
	ip[8] = 64
	ip[9] = k.Proto
	copy(ip[12:16], k.Src[:4])
	copy(ip[16:20], k.Dst[:4])
	return appendTransport(b, k, l4)
}

func synthIPv6(b []byte, k *flow.Key) []byte {
	l4 := transport(k)
	ext := 0
	if k.Flags&flow.FlagFragment != 0 {
		ext = 8
	}
	h := len(b)
	b = append(b, make([]byte, 40+ext)...)
	ip := b[h:]
	ip[0] = 0x60
	binary.BigEndian.PutUint16(ip[4:], uint16(ext+l4))
	ip[6] = k.Proto
	ip[7] = 64
	copy(ip[8:24], k.Src[:])
	copy(ip[24:40], k.Dst[:])
	if ext > 0 {
		ip[6] = 44
		ip[40] = k.Proto
		binary.BigEndian.PutUint16(ip[42:], 1<<3) // offset 8
	}
	return appendTransport(b, k, l4)
}

// transport returns the length of the synthetic transport header.
func transport(k *flow.Key) int {
	if k.Flags&flow.FlagPorts == 0 {
		return 0
	}
	switch k.Proto {
	case flow.ProtoTCP:
		return 20
	case flow.ProtoUDP, flow.ProtoICMP, flow.ProtoICMPv6:
		return 8
	case flow.ProtoSCTP:
		return 12
	}
	return 0
}

func appendTransport(b []byte, k *flow.Key, n int) []byte {
	if n == 0 {
		return b
	}
	h := len(b)
	b = append(b, make([]byte, n)...)
	t := b[h:]
	switch k.Proto {
	case flow.ProtoICMP, flow.ProtoICMPv6:
		t[0] = byte(k.SrcPort)
		if k.Flags&flow.FlagOneWay != 0 {
			t[1] = byte(k.DstPort)
		}
	default:
		binary.BigEndian.PutUint16(t[0:], k.SrcPort)
		binary.BigEndian.PutUint16(t[2:], k.DstPort)
		if k.Proto == flow.ProtoTCP {
			t[12] = 5 << 4
		} else if k.Proto == flow.ProtoUDP {
			binary.BigEndian.PutUint16(t[4:], 8)
		}
	}
	return b
}
