package flowquery

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
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// conv is a generated conversation; the initiator is src.
type conv struct {
	proto        uint8
	src, dst     netip.Addr
	sport, dport uint16
	vlan         uint16 // 0: untagged
	n            int    // packets
	rst          bool
}

// tpkt is one generated packet.
type tpkt struct {
	ts    int64
	c     int  // the conversation
	init  bool // sent by the initiator
	frame []byte
}

// base is the time of the first generated packet.
var base = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC).UnixNano()

// genConvs makes n conversations: TCP with handshakes, data and FIN or
// RST ends, UDP, ICMP echoes, IPv4 and IPv6, a fifth in a VLAN.
func genConvs(seed uint64, n int) []conv {
	rng := rand.New(rand.NewPCG(seed, 1))
	cs := make([]conv, n)
	for i := range cs {
		c := conv{n: 4 + rng.IntN(30), sport: uint16(20000 + i), dport: []uint16{80, 443, 53, 5432}[rng.IntN(4)]}
		switch rng.IntN(5) {
		case 0, 1, 2:
			c.proto = flow.ProtoTCP
			c.rst = rng.IntN(3) == 0
		case 3:
			c.proto = flow.ProtoUDP
		default:
			c.proto = flow.ProtoICMP
			c.sport, c.dport = 8, 0
		}
		h := byte(1 + i%50)
		if rng.IntN(3) == 0 {
			c.src = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: h})
			c.dst = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 14: 1, 15: byte(i % 7)})
			if c.proto == flow.ProtoICMP {
				c.proto, c.sport = flow.ProtoICMPv6, 128
			}
		} else {
			c.src = netip.AddrFrom4([4]byte{10, 0, 0, h})
			c.dst = netip.AddrFrom4([4]byte{192, 168, 1, byte(i % 7)})
		}
		if rng.IntN(5) == 0 {
			c.vlan = uint16(100 + i%3)
		}
		cs[i] = c
	}
	return cs
}

// genPackets makes the packets of cs, interleaved in time (1 ms apart
// per conversation, conversations starting 3 ms apart).
func genPackets(cs []conv) []tpkt {
	var ps []tpkt
	for ci, c := range cs {
		for j := range c.n {
			init := j%2 == 0
			var flags uint8
			if c.proto == flow.ProtoTCP {
				switch {
				case j == 0:
					flags = flow.TCPSyn
				case j == 1:
					flags = flow.TCPSyn | flow.TCPAck
				case j == c.n-1 && c.rst:
					flags = flow.TCPRst
				case j >= c.n-2:
					flags = flow.TCPFin | flow.TCPAck
				default:
					flags = flow.TCPAck
				}
			}
			ps = append(ps, tpkt{ts: base + int64(ci)*3e6 + int64(j)*1e6, c: ci, init: init, frame: frame(c, init, flags, 10+(ci*7+j*13)%300)})
		}
	}
	slicesSortByTime(ps)
	return ps
}

func slicesSortByTime(ps []tpkt) {
	for i := 1; i < len(ps); i++ { // insertion sort keeps equal times in order
		for j := i; j > 0 && ps[j].ts < ps[j-1].ts; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

// frame builds one packet of c, from the initiator when init.
func frame(c conv, init bool, flags uint8, payload int) []byte {
	src, dst, sp, dp := c.src, c.dst, c.sport, c.dport
	if !init {
		src, dst, sp, dp = dst, src, dp, sp
	}
	var l4 []byte
	switch c.proto {
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
		l4[0] = byte(c.sport)
		if !init {
			l4[0] = map[uint8]byte{flow.ProtoICMP: 0, flow.ProtoICMPv6: 129}[c.proto]
		}
	}
	b := []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1}
	if c.vlan != 0 {
		b = binary.BigEndian.AppendUint16(b, 0x8100)
		b = binary.BigEndian.AppendUint16(b, c.vlan)
	}
	if src.Is4() {
		b = binary.BigEndian.AppendUint16(b, flow.EtherIPv4)
		ip := make([]byte, 20)
		ip[0], ip[8], ip[9] = 0x45, 64, c.proto
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(l4)))
		s, d := src.As4(), dst.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
		return append(append(b, ip...), l4...)
	}
	b = binary.BigEndian.AppendUint16(b, flow.EtherIPv6)
	ip := make([]byte, 40)
	ip[0], ip[6], ip[7] = 0x60, c.proto, 64
	binary.BigEndian.PutUint16(ip[4:], uint16(len(l4)))
	s, d := src.As16(), dst.As16()
	copy(ip[8:], s[:])
	copy(ip[24:], d[:])
	return append(append(b, ip...), l4...)
}

// agentSpec is one agent of a generated root: the conversations it sees
// (keep) on interface iface, perFile packets to a data file.
type agentSpec struct {
	name, iface string
	keep        func(c int) bool
	perFile     int
}

// writeRoot writes the data files, indexes and flow files of agents
// below dir, and returns each agent's data files.
func writeRoot(t testing.TB, dir string, ps []tpkt, agents []agentSpec, cfg *flow.Config) map[string][]string {
	t.Helper()
	files := map[string][]string{}
	for _, a := range agents {
		if err := os.MkdirAll(filepath.Join(dir, a.name), 0o755); err != nil {
			t.Fatal(err)
		}
		var sel []tpkt
		for _, p := range ps {
			if a.keep == nil || a.keep(p.c) {
				sel = append(sel, p)
			}
		}
		for i := 0; i < len(sel); i += a.perFile {
			name := fmt.Sprintf("%s_%sZ.pcapng", a.name, time.Unix(0, base).UTC().Add(time.Duration(i)*time.Second).Format("20060102T150405.000"))
			p := filepath.Join(dir, a.name, name)
			writePcapng(t, p, a.iface, sel[i:min(i+a.perFile, len(sel))])
			files[a.name] = append(files[a.name], p)
		}
		writeFlowFiles(t, files[a.name], cfg)
	}
	return files
}

func writePcapng(t testing.TB, p, iface string, ps []tpkt) {
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
	for _, pk := range ps {
		if err := w.WritePacket(0, pk.ts, uint32(len(pk.frame)), pk.frame); err != nil {
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
