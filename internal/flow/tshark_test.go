package flow

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// traffic generates a capture of conversations interleaved in time:
// TCP (handshakes, data both ways, retransmissions, FIN or RST or left
// open), UDP, ICMP and ICMPv6 echoes, over IPv4 and IPv6, some in VLANs
// (802.1Q and QinQ), each conversation on its own addresses and ports.
type traffic struct {
	rng *rand.Rand
	ts  int64
	out []tpkt
}

type tpkt struct {
	ts   int64
	p    pkt
	wire int // extra bytes on the wire beyond the frame (a snap length)
}

func (g *traffic) addr(i int, side byte, v6 bool) netip.Addr {
	if v6 {
		b := netip.MustParseAddr("2001:db8::").As16()
		b[12], b[13], b[15] = byte(i>>8), byte(i), side
		return netip.AddrFrom16(b)
	}
	return netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), side})
}

// conv appends a conversation's packets starting at about start.
func (g *traffic) conv(i int, start int64) {
	v6 := g.rng.IntN(3) == 0
	c, s := g.addr(i, 1, v6), g.addr(i, 2, v6)
	var vlans []uint16
	switch g.rng.IntN(5) {
	case 0:
		vlans = []uint16{uint16(1 + i%4000)}
	case 1:
		vlans = []uint16{100, uint16(1 + i%4000)}
	}
	ts := start
	emit := func(p pkt) {
		p.vlans = vlans
		ts += int64(g.rng.IntN(20)+1) * int64(time.Millisecond)
		g.out = append(g.out, tpkt{ts: ts, p: p})
	}
	cport, sport := uint16(20000+g.rng.IntN(40000)), []uint16{80, 443, 53, 5432}[g.rng.IntN(4)]
	switch kind := g.rng.IntN(10); {
	case kind < 6: // TCP
		cseq, sseq := g.rng.Uint32(), g.rng.Uint32()
		cp := func(flags uint8, n int) pkt {
			p := pkt{src: c, dst: s, proto: ProtoTCP, sport: cport, dport: sport, flags: flags, seq: cseq, ack: sseq, payload: n}
			cseq += uint32(n)
			if flags&(TCPSyn|TCPFin) != 0 {
				cseq++
			}
			return p
		}
		sp := func(flags uint8, n int) pkt {
			p := pkt{src: s, dst: c, proto: ProtoTCP, sport: sport, dport: cport, flags: flags, seq: sseq, ack: cseq, payload: n}
			sseq += uint32(n)
			if flags&(TCPSyn|TCPFin) != 0 {
				sseq++
			}
			return p
		}
		emit(cp(TCPSyn, 0))
		emit(sp(TCPSyn|TCPAck, 0))
		emit(cp(TCPAck, 0))
		for range g.rng.IntN(12) {
			p := cp(TCPAck|0x08, g.rng.IntN(700))
			emit(p)
			if g.rng.IntN(6) == 0 {
				emit(p) // a retransmission
			}
			emit(sp(TCPAck|0x08, g.rng.IntN(700)))
		}
		switch g.rng.IntN(3) {
		case 0:
			emit(cp(TCPFin|TCPAck, 0))
			emit(sp(TCPFin|TCPAck, 0))
			emit(cp(TCPAck, 0))
		case 1:
			emit(sp(TCPRst|TCPAck, 0))
		}
	case kind < 8: // UDP
		for range 1 + g.rng.IntN(6) {
			emit(pkt{src: c, dst: s, proto: ProtoUDP, sport: cport, dport: sport, payload: g.rng.IntN(600)})
			if g.rng.IntN(3) > 0 {
				emit(pkt{src: s, dst: c, proto: ProtoUDP, sport: sport, dport: cport, payload: g.rng.IntN(600)})
			}
		}
	default: // ICMP echo
		proto, req, rep := uint8(ProtoICMP), uint16(8), uint16(0)
		if v6 {
			proto, req, rep = ProtoICMPv6, 128, 129
		}
		for range 1 + g.rng.IntN(4) {
			emit(pkt{src: c, dst: s, proto: proto, sport: req, payload: 56})
			emit(pkt{src: s, dst: c, proto: proto, sport: rep, payload: 56})
		}
	}
}

// generate returns n conversations' packets in time order.
func generate(seed uint64, n int) []tpkt {
	g := &traffic{rng: rand.New(rand.NewPCG(seed, 27))}
	start := int64(1.7e18)
	for i := range n {
		g.conv(i, start+int64(g.rng.IntN(n))*int64(5*time.Millisecond))
	}
	slices.SortStableFunc(g.out, func(a, b tpkt) int { return int(a.ts - b.ts) })
	for i := range g.out {
		if g.rng.IntN(10) == 0 {
			g.out[i].wire = 100 // captured with a snap length
		}
	}
	return g.out
}

// convKey is a conversation as tshark aggregates it: an address pair,
// with ports for conv,tcp and conv,udp; A is the smaller endpoint.
type convKey struct {
	table string // "tcp", "udp", "ip", "ipv6"
	a, b  string // "addr" or "addr:port"
}

type convVal struct{ aFrames, aBytes, bFrames, bBytes uint64 }

func orderConv(table, x, y string, xf, xb, yf, yb uint64) (convKey, convVal) {
	if x > y {
		x, y, xf, xb, yf, yb = y, x, yf, yb, xf, xb
	}
	return convKey{table, x, y}, convVal{xf, xb, yf, yb}
}

// ourConvs aggregates records as tshark's tables do.
func ourConvs(rs []Record) map[convKey]convVal {
	m := map[convKey]convVal{}
	add := func(table, x, y string, r *Record) {
		k, v := orderConv(table, x, y, r.Packets[0], r.Bytes[0], r.Packets[1], r.Bytes[1])
		o := m[k]
		m[k] = convVal{o.aFrames + v.aFrames, o.aBytes + v.aBytes, o.bFrames + v.bFrames, o.bBytes + v.bBytes}
	}
	for i := range rs {
		r := &rs[i]
		k := &r.Key
		table := "ip"
		switch k.Kind {
		case KindIPv6:
			table = "ipv6"
		case KindIPv4:
		default:
			continue
		}
		s, d := k.SrcAddr().String(), k.DstAddr().String()
		add(table, s, d, r)
		if k.Proto == ProtoTCP || k.Proto == ProtoUDP {
			name := map[uint8]string{ProtoTCP: "tcp", ProtoUDP: "udp"}[k.Proto]
			add(name, fmt.Sprintf("%s:%d", s, k.SrcPort), fmt.Sprintf("%s:%d", d, k.DstPort), r)
		}
	}
	return m
}

// tsharkConvs runs tshark's conversation tables over path.
func tsharkConvs(t *testing.T, path string) (map[convKey]convVal, map[convKey][2]uint64) {
	t.Helper()
	cmd := exec.Command("tshark", "-n", "-q", "-z", "conv,tcp", "-z", "conv,udp", "-z", "conv,ipv6", "-z", "conv,ip", "-r", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	return parseConvs(t, out)
}

// parseConvs reads tshark's "-z conv,X" tables: a title line
// "TCP Conversations" (UDP, IPv4, IPv6), then rows
// "A <-> B  framesBA bytesBA  framesAB bytesAB  frames bytes  start duration",
// where the "<-" columns count B to A and "->" A to B (ports joined to
// the address by ':'); bytes may carry a unit ("bytes", "kB").
func parseConvs(t *testing.T, out []byte) (map[convKey]convVal, map[convKey][2]uint64) {
	t.Helper()
	m := map[convKey]convVal{}
	units := map[convKey][2]uint64{}
	table := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "TCP Conversations"):
			table = "tcp"
			continue
		case strings.HasPrefix(line, "UDP Conversations"):
			table = "udp"
			continue
		case strings.HasPrefix(line, "IPv4 Conversations"):
			table = "ip"
			continue
		case strings.HasPrefix(line, "IPv6 Conversations"):
			table = "ipv6"
			continue
		}
		f := strings.Fields(line)
		if table == "" || len(f) < 4 || f[1] != "<->" {
			continue
		}
		nums := numbers(f[3:])
		if len(nums) < 4 {
			t.Fatalf("tshark row %q: numbers %v", line, nums)
		}
		a, b := hostPort(f[0], table), hostPort(f[2], table)
		k, v := orderConv(table, a, b, nums[2].n, nums[3].n, nums[0].n, nums[1].n)
		if _, dup := m[k]; dup {
			t.Fatalf("tshark: conversation %v twice", k)
		}
		m[k] = v
		if a > b {
			nums[0], nums[1], nums[2], nums[3] = nums[2], nums[3], nums[0], nums[1]
		}
		units[k] = [2]uint64{nums[3].unit, nums[1].unit} // of A's bytes and B's
	}
	return m, units
}

// count is a number from tshark's table: bytes above 9999 are printed
// in kB (MB, ...) and rounded down.
type count struct{ n, unit uint64 }

// numbers reads the counts of a row, a unit word after a byte count
// ("bytes", "kB", "MB") folded into it.
func numbers(f []string) []count {
	var out []count
	for i := 0; i < len(f) && len(out) < 4; i++ {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			continue
		}
		c := count{n, 1}
		if i+1 < len(f) {
			switch f[i+1] {
			case "kB":
				c.unit = 1000
			case "MB":
				c.unit = 1000 * 1000
			}
		}
		out = append(out, c)
	}
	return out
}

// hostPort normalises tshark's "addr:port" (IPv6 addresses hold colons
// themselves) to netip's forms.
func hostPort(s, table string) string {
	if table == "ip" || table == "ipv6" {
		return netip.MustParseAddr(s).String()
	}
	i := strings.LastIndexByte(s, ':')
	return netip.MustParseAddr(s[:i]).String() + s[i:]
}

// TestTsharkConversations: per conversation, the packets and wire bytes
// of the flow records equal tshark's conversation tables (TCP and UDP
// per address and port pair, IPv4 and IPv6 per address pair) over the
// same capture.
func TestTsharkConversations(t *testing.T) {
	if _, err := exec.LookPath("tshark"); err != nil {
		if os.Getenv("PCAPSYNC_E2E_REQUIRE") != "" {
			t.Fatal("tshark not installed")
		}
		t.Skip("tshark not installed")
	}
	pkts := generate(1, 400)
	path := filepath.Join(t.TempDir(), "mix.pcap")
	if p := os.Getenv("FLOW_KEEP"); p != "" {
		path = p
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pcapfile.NewPcapWriter(f, LinkEthernet, 65535, true)
	if err != nil {
		t.Fatal(err)
	}
	tb := newTable(t, &Config{SplitPackets: 7, MaxFlows: 64})
	var recs []Record
	ids := make([]string, 0, len(pkts))
	for i, tp := range pkts {
		b := tp.p.frame()
		wire := uint32(len(b) + tp.wire)
		if tp.wire > 0 && len(b) > 100 {
			b = b[:100] // every header kept: see docs/flows.md for cut headers
		}
		if err := w.WritePacket(tp.ts, wire, b); err != nil {
			t.Fatal(err)
		}
		tb.Add(0, LinkEthernet, tp.ts, wire, b, uint32(i/50))
		var k Key
		Decode(&k, LinkEthernet, 0, b)
		ids = append(ids, k.CommunityID(0))
		if i%100 == 0 {
			recs = append(recs, tb.Records()...)
			tb.Clear()
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	tb.Flush()
	recs = append(recs, tb.Records()...)
	if tb.Counters().Evicted == 0 {
		t.Errorf("no flow evicted: the bound is not exercised")
	}
	ours := ourConvs(recs)
	theirs, units := tsharkConvs(t, path)
	if len(theirs) < 400 {
		t.Fatalf("tshark listed %d conversations, want at least 400", len(theirs))
	}
	bad, exact := 0, 0
	for k, v := range theirs {
		o := ours[k]
		u := units[k]
		if u == [2]uint64{1, 1} {
			exact++
		}
		o.aBytes /= u[0]
		o.bBytes /= u[1]
		if o != v {
			if bad++; bad <= 10 {
				t.Errorf("%v: ours %+v, tshark %+v", k, o, v)
			}
		}
	}
	for k := range ours {
		if _, ok := theirs[k]; !ok {
			if bad++; bad <= 10 {
				t.Errorf("%v: ours only", k)
			}
		}
	}
	if exact < len(theirs)*9/10 {
		t.Errorf("only %d of %d conversations' bytes printed exactly by tshark", exact, len(theirs))
	}
	t.Logf("%d packets, %d records, %d conversations compared (%d to the byte), %d differ", len(pkts), len(recs), len(theirs), exact, bad)
	checkCommunityIDs(t, path, ids)
}

// checkCommunityIDs compares the Community ID of every packet's key with
// the one Wireshark's Community ID dissector computes for it.
func checkCommunityIDs(t *testing.T, path string, ids []string) {
	t.Helper()
	cmd := exec.Command("tshark", "-n", "-r", path, "--enable-protocol", "communityid", "-T", "fields", "-e", "communityid")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) != len(ids) {
		t.Fatalf("tshark printed %d lines for %d packets", len(lines), len(ids))
	}
	bad := 0
	for i, l := range lines {
		if l != ids[i] {
			if bad++; bad <= 10 {
				t.Errorf("packet %d: community id %q, tshark %q", i+1, ids[i], l)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d packets' community ids differ from tshark's", bad, len(ids))
	}
}
