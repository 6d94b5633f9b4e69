// Package flowtest writes output roots with flow files for the tests
// of the flow readers (flowquery, pcapsync flows, GET /flows, query
// --community-id): generated conversations, data files, their indexes
// and flow files.
package flowtest

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// Conv is a generated conversation; the initiator is src.
type Conv struct {
	Proto        uint8
	Src, Dst     netip.Addr
	Sport, Dport uint16
	VLAN         uint16 // 0: untagged
	N            int    // packets
	RST          bool
}

// Packet is one generated packet.
type Packet struct {
	TS    int64
	C     int  // the conversation
	Init  bool // sent by the initiator
	Frame []byte
}

// BatchPackets is the packets of a batch: its last carries a batch
// mark (layout.AppendMark), where an index block may end.
const BatchPackets = 8

// Base is the time of the first generated packet.
var Base = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC).UnixNano()

// GenConvs makes n conversations: TCP with handshakes, data and FIN or
// RST ends, UDP, ICMP echoes, IPv4 and IPv6, a fifth in a VLAN.
func GenConvs(seed uint64, n int) []Conv {
	rng := rand.New(rand.NewPCG(seed, 1))
	cs := make([]Conv, n)
	for i := range cs {
		c := Conv{N: 4 + rng.IntN(30), Sport: uint16(20000 + i), Dport: []uint16{80, 443, 53, 5432}[rng.IntN(4)]}
		switch rng.IntN(5) {
		case 0, 1, 2:
			c.Proto = flow.ProtoTCP
			c.RST = rng.IntN(3) == 0
		case 3:
			c.Proto = flow.ProtoUDP
		default:
			c.Proto = flow.ProtoICMP
			c.Sport, c.Dport = 8, 0
		}
		h := byte(1 + i%50)
		if rng.IntN(3) == 0 {
			c.Src = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: h})
			c.Dst = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: 1, 15: byte(i % 7)})
			if c.Proto == flow.ProtoICMP {
				c.Proto, c.Sport = flow.ProtoICMPv6, 128
			}
		} else {
			c.Src = netip.AddrFrom4([4]byte{10, 0, 0, h})
			c.Dst = netip.AddrFrom4([4]byte{192, 168, 1, byte(i % 7)})
		}
		if rng.IntN(5) == 0 {
			c.VLAN = uint16(100 + i%3)
		}
		cs[i] = c
	}
	return cs
}

// GenPackets makes the packets of cs, interleaved in time (1 ms apart
// per conversation, conversations starting 3 ms apart).
func GenPackets(cs []Conv) []Packet {
	var ps []Packet
	for ci, c := range cs {
		for j := range c.N {
			init := j%2 == 0
			var flags uint8
			if c.Proto == flow.ProtoTCP {
				switch {
				case j == 0:
					flags = flow.TCPSyn
				case j == 1:
					flags = flow.TCPSyn | flow.TCPAck
				case j == c.N-1 && c.RST:
					flags = flow.TCPRst
				case j >= c.N-2:
					flags = flow.TCPFin | flow.TCPAck
				default:
					flags = flow.TCPAck
				}
			}
			ps = append(ps, Packet{TS: Base + int64(ci)*3e6 + int64(j)*1e6, C: ci, Init: init, Frame: Frame(c, init, flags, 10+(ci*7+j*13)%300)})
		}
	}
	slicesSortByTime(ps)
	return ps
}

func slicesSortByTime(ps []Packet) {
	for i := 1; i < len(ps); i++ { // insertion sort keeps equal times in order
		for j := i; j > 0 && ps[j].TS < ps[j-1].TS; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// Frame builds one packet of c, from the initiator when init.
func Frame(c Conv, init bool, flags uint8, payload int) []byte {
	src, dst, sp, dp := c.Src, c.Dst, c.Sport, c.Dport
	if !init {
		src, dst, sp, dp = dst, src, dp, sp
	}
	var l4 []byte
	switch c.Proto {
	case flow.ProtoTCP:
		l4 = make([]byte, 20+payload)
		binary.BigEndian.PutUint16(l4[0:], sp)
		binary.BigEndian.PutUint16(l4[2:], dp)
		l4[12], l4[13] = 5<<4, flags
	case flow.ProtoUDP:
		l4 = make([]byte, 8+payload)
		binary.BigEndian.PutUint16(l4[0:], sp)
		binary.BigEndian.PutUint16(l4[2:], dp)
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
	default: // echo request from the initiator, reply back
		l4 = make([]byte, 8+payload)
		l4[0] = byte(c.Sport)
		if !init {
			l4[0] = map[uint8]byte{flow.ProtoICMP: 0, flow.ProtoICMPv6: 129}[c.Proto]
		}
	}
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	if c.VLAN != 0 {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, c.VLAN)
	}
	if src.Is4() {
		b = binary.BigEndian.AppendUint16(b, flow.EtherIPv4)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, c.Proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		return append(append(b, ip...), l4...)
	}
	b = binary.BigEndian.AppendUint16(b, flow.EtherIPv6)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, c.Proto, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(b, ip...), l4...)
}

// Agent is one agent of a generated root: the conversations it sees
// (keep) on interface iface, perFile packets to a data file.
type Agent struct {
	Name, Iface string
	Keep        func(c int) bool
	PerFile     int
	// Names shifts the times of the data files' names (Base plus one
	// second per file) by this much: the agent's files written into two
	// roots have distinct names, for a copy of both in one.
	Names time.Duration
}

// WriteRoot writes the data files, indexes and flow files of agents
// below dir, and returns each agent's data files.
func WriteRoot(t testing.TB, dir string, ps []Packet, agents []Agent, cfg *flow.Config) map[string][]string {
	t.Helper()
	files := map[string][]string{}
	for _, a := range agents {
		if err := os.MkdirAll(filepath.Join(dir, a.Name), 0o755); err != nil {
			t.Fatal(err)
		}
		var sel []Packet
		for _, p := range ps {
			if a.Keep == nil || a.Keep(p.C) {
				sel = append(sel, p)
			}
		}
		for i := 0; i < len(sel); i += a.PerFile {
			name := fmt.Sprintf("%s_%sZ.pcapng", a.Name, time.Unix(0, Base).UTC().Add(a.Names+time.Duration(i)*time.Second).Format("20060102T150405.000"))
			p := filepath.Join(dir, a.Name, name)
			writePcapng(t, p, a.Iface, sel[i:min(i+a.PerFile, len(sel))])
			files[a.Name] = append(files[a.Name], p)
		}
		WriteFlowFiles(t, files[a.Name], cfg)
	}
	return files
}

func writePcapng(t testing.TB, p, iface string, ps []Packet) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriter(f)
	w, err := pcapfile.NewNgWriter(bw, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(pcapfile.Interface{Name: iface, LinkType: 1}); err != nil {
		t.Fatal(err)
	}
	for i, pk := range ps {
		var err error
		if i%BatchPackets == BatchPackets-1 || i == len(ps)-1 { // a batch's last packet carries its mark, as the store writes it
			err = w.WritePacketCustom(0, pk.TS, uint32(len(pk.Frame)), pk.Frame, layout.MarkPEN, layout.AppendMark(nil, [16]byte{1}, uint64(i)))
		} else {
			err = w.WritePacket(0, pk.TS, uint32(len(pk.Frame)), pk.Frame)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
