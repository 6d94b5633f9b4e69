package flowquery

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
)

// TimeLayout is how flows' times are written: RFC 3339 in UTC with
// nanoseconds, always 9 digits (so that they sort as text).
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// JSON is a flow as pcapsync flows --json and GET /flows write it, one
// object per line. Ports are the initiator's (src) and the responder's;
// for ICMP the type and the counterpart's type (or the code of a one-way
// message), as Community ID takes them.
type JSON struct {
	CommunityID string   `json:"community_id"`
	Agent       string   `json:"agent"`
	Iface       string   `json:"iface"`
	Proto       string   `json:"proto"`
	SrcIP       string   `json:"src_ip"`
	SrcPort     uint16   `json:"src_port"`
	DstIP       string   `json:"dst_ip"`
	DstPort     uint16   `json:"dst_port"`
	VLAN        []uint16 `json:"vlan,omitempty"`
	EtherType   string   `json:"ethertype,omitempty"` // traffic that is not IP
	SrcMAC      string   `json:"src_mac,omitempty"`
	DstMAC      string   `json:"dst_mac,omitempty"`
	First       string   `json:"first"`
	Last        string   `json:"last"`
	SrcPackets  uint64   `json:"src_packets"`
	SrcBytes    uint64   `json:"src_bytes"`
	DstPackets  uint64   `json:"dst_packets"`
	DstBytes    uint64   `json:"dst_bytes"`
	TCPFlags    string   `json:"tcp_flags"`     // both sides'
	SrcTCPFlags string   `json:"src_tcp_flags"` // the initiator's
	DstTCPFlags string   `json:"dst_tcp_flags"`
	End         string   `json:"end"`
	SYN         bool     `json:"syn"` // a SYN decided the initiator
	Parts       int      `json:"parts"`
	Server      string   `json:"server,omitempty"` // the server it came from (flows --from)
}

// CSVHeader are the columns CSV writes, the JSON keys.
var CSVHeader = []string{"community_id", "agent", "iface", "proto", "src_ip", "src_port", "dst_ip", "dst_port",
	"vlan", "first", "last", "src_packets", "src_bytes", "dst_packets", "dst_bytes", "tcp_flags", "end", "parts"}

// JSON returns f as written.
func (f *Flow) JSON() JSON {
	k := &f.Key
	j := JSON{CommunityID: f.CommunityID, Agent: f.Agent, Iface: f.Iface, Proto: ProtoName(k),
		SrcPort: k.SrcPort, DstPort: k.DstPort, VLAN: slices.Clone(k.VLAN[:k.NVLAN]),
		First: FormatTime(f.First), Last: FormatTime(f.Last),
		SrcPackets: f.Packets[0], SrcBytes: f.Bytes[0], DstPackets: f.Packets[1], DstBytes: f.Bytes[1],
		TCPFlags: TCPFlags(f.TCPFlags[0] | f.TCPFlags[1]), SrcTCPFlags: TCPFlags(f.TCPFlags[0]), DstTCPFlags: TCPFlags(f.TCPFlags[1]),
		End: f.End.String(), SYN: f.Flags&flow.RecordSYN != 0, Parts: len(f.Parts), Server: f.Server}
	switch k.Kind {
	case flow.KindIPv4, flow.KindIPv6:
		j.SrcIP, j.DstIP = k.SrcAddr().String(), k.DstAddr().String()
	case flow.KindLink:
		j.SrcMAC, j.DstMAC = mac(k.Src[:6]), mac(k.Dst[:6])
		j.EtherType = fmt.Sprintf("0x%04x", k.EtherType)
	}
	return j
}

// CSV returns f's columns (CSVHeader).
func (f *Flow) CSV() []string {
	j := f.JSON()
	vl := make([]string, len(j.VLAN))
	for i, v := range j.VLAN {
		vl[i] = strconv.Itoa(int(v))
	}
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []string{j.CommunityID, j.Agent, j.Iface, j.Proto, cmp.Or(j.SrcIP, j.SrcMAC), strconv.Itoa(int(j.SrcPort)),
		cmp.Or(j.DstIP, j.DstMAC), strconv.Itoa(int(j.DstPort)), strings.Join(vl, "."), j.First, j.Last,
		u(j.SrcPackets), u(j.SrcBytes), u(j.DstPackets), u(j.DstBytes), j.TCPFlags, j.End, strconv.Itoa(j.Parts)}
}

// FormatTime formats Unix ns as TimeLayout in UTC.
func FormatTime(ns int64) string { return time.Unix(0, ns).UTC().Format(TimeLayout) }

func mac(b []byte) string {
	h := hex.EncodeToString(b)
	var s strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			s.WriteByte(':')
		}
		s.WriteString(h[i : i+2])
	}
	return s.String()
}

// ProtoName names a key's protocol: tcp, udp, icmp, icmp6, sctp, the
// number of another IP protocol, "ether" for traffic that is not IP
// (ethertype in JSON), "" for a frame not read.
func ProtoName(k *flow.Key) string {
	switch k.Kind {
	case flow.KindLink:
		return "ether"
	case flow.KindNone:
		return ""
	}
	switch k.Proto {
	case flow.ProtoTCP:
		return "tcp"
	case flow.ProtoUDP:
		return "udp"
	case flow.ProtoICMP:
		return "icmp"
	case flow.ProtoICMPv6:
		return "icmp6"
	case flow.ProtoSCTP:
		return "sctp"
	}
	return strconv.Itoa(int(k.Proto))
}

// TCPFlags writes flags as their names joined by '|' (FIN|SYN|ACK), in
// bit order; "" for none.
func TCPFlags(f uint8) string {
	names := [8]string{"FIN", "SYN", "RST", "PSH", "ACK", "URG", "ECE", "CWR"}
	var s []string
	for i, n := range names {
		if f&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	return strings.Join(s, "|")
}

// Endpoint writes one side of a flow: ADDR.PORT (IPv4), [ADDR].PORT
// (IPv6; as tshark's conversations) or ADDR alone without ports; a MAC
// for traffic that is not IP.
func Endpoint(k *flow.Key, src bool) string {
	a, port, b := k.DstAddr(), k.DstPort, k.Dst[:6]
	if src {
		a, port, b = k.SrcAddr(), k.SrcPort, k.Src[:6]
	}
	switch k.Kind {
	case flow.KindLink:
		return mac(b)
	case flow.KindNone:
		return "-"
	}
	if k.Flags&flow.FlagPorts == 0 {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}

// Sort orders flows by key: first (the default: by first time, agent,
// interface), last, bytes, packets or duration (the largest first).
// Another key is an error.
func Sort(fs []Flow, key string) error {
	var by func(a, b *Flow) int
	switch key {
	case "", "first":
		return nil // Run's order
	case "last":
		by = func(a, b *Flow) int { return cmp.Compare(a.Last, b.Last) }
	case "bytes":
		by = func(a, b *Flow) int { return cmp.Compare(b.TotalBytes(), a.TotalBytes()) }
	case "packets":
		by = func(a, b *Flow) int { return cmp.Compare(b.TotalPackets(), a.TotalPackets()) }
	case "duration":
		by = func(a, b *Flow) int { return cmp.Compare(b.Last-b.First, a.Last-a.First) }
	default:
		return fmt.Errorf("%w: sort by %q: want first, last, bytes, packets or duration", ErrConfig, key)
	}
	slices.SortStableFunc(fs, func(a, b Flow) int { return by(&a, &b) })
	return nil
}

// Flow returns the flow j describes (as JSON wrote it, from a server's
// GET /flows): its key, times, counts, flags and end; Parts holds as
// many parts as j says, without their files and blocks.
func (j *JSON) Flow() (Flow, error) {
	f := Flow{Agent: j.Agent, Iface: j.Iface, CommunityID: j.CommunityID, Server: j.Server, Parts: make([]Part, min(max(j.Parts, 0), 1<<16))}
	k := &f.Key
	var err error
	if f.First, err = parseTime(j.First); err != nil {
		return f, err
	}
	if f.Last, err = parseTime(j.Last); err != nil {
		return f, err
	}
	if j.SrcIP != "" {
		src, err1 := netip.ParseAddr(j.SrcIP)
		dst, err2 := netip.ParseAddr(j.DstIP)
		if err := errors.Join(err1, err2); err != nil {
			return f, fmt.Errorf("flow %s: %w", j.CommunityID, err)
		}
		k.Kind, k.EtherType = flow.KindIPv4, flow.EtherIPv4
		if src.Is6() {
			k.Kind, k.EtherType = flow.KindIPv6, flow.EtherIPv6
		}
		k.Src, k.Dst = src.As16(), dst.As16()
		if src.Is4() {
			k.Src, k.Dst = [16]byte{}, [16]byte{}
			s4, d4 := src.As4(), dst.As4()
			copy(k.Src[:], s4[:])
			copy(k.Dst[:], d4[:])
		}
		k.Proto = protoNumber(j.Proto)
		if k.Proto == flow.ProtoTCP || k.Proto == flow.ProtoUDP || k.Proto == flow.ProtoSCTP || k.Proto == flow.ProtoICMP || k.Proto == flow.ProtoICMPv6 {
			k.Flags |= flow.FlagPorts
		}
	} else if j.SrcMAC != "" {
		k.Kind = flow.KindLink
		if m, err := net.ParseMAC(j.SrcMAC); err == nil && len(m) == 6 {
			copy(k.Src[:], m)
		}
		if m, err := net.ParseMAC(j.DstMAC); err == nil && len(m) == 6 {
			copy(k.Dst[:], m)
		}
	}
	k.SrcPort, k.DstPort = j.SrcPort, j.DstPort
	for i, v := range j.VLAN {
		if i < flow.MaxVLANs {
			k.VLAN[i], k.NVLAN = v, uint8(i+1)
		}
	}
	f.Packets, f.Bytes = [2]uint64{j.SrcPackets, j.DstPackets}, [2]uint64{j.SrcBytes, j.DstBytes}
	f.TCPFlags = [2]uint8{tcpFlagBits(j.SrcTCPFlags), tcpFlagBits(j.DstTCPFlags)}
	for e := flow.EndOpen; e <= flow.EndEvicted; e++ {
		if e.String() == j.End {
			f.End = e
		}
	}
	if j.SYN {
		f.Flags |= flow.RecordSYN
	}
	return f, nil
}

func parseTime(s string) (int64, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, fmt.Errorf("flow time %q: %w", s, err)
	}
	return t.UnixNano(), nil
}

func protoNumber(name string) uint8 {
	switch name {
	case "tcp":
		return flow.ProtoTCP
	case "udp":
		return flow.ProtoUDP
	case "icmp":
		return flow.ProtoICMP
	case "icmp6":
		return flow.ProtoICMPv6
	case "sctp":
		return flow.ProtoSCTP
	}
	n, _ := strconv.ParseUint(name, 10, 8)
	return uint8(n)
}

func tcpFlagBits(s string) uint8 {
	var b uint8
	for _, n := range strings.Split(s, "|") {
		for i := range 8 {
			if TCPFlags(1<<i) == n {
				b |= 1 << i
			}
		}
	}
	return b
}
