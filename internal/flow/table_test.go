package flow

import (
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/raceflag"
)

// feed adds the packets to t, one a millisecond from ts0, each in block
// block(i).
func feed(t *Table, ts0 int64, ps []pkt, block func(i int) uint32) {
	for i, p := range ps {
		b := p.frame()
		t.Add(0, p.lt(), ts0+int64(i)*int64(time.Millisecond), uint32(len(b)), b, block(i))
	}
}

func zeroBlock(int) uint32 { return 0 }

func newTable(t *testing.T, c *Config) *Table {
	t.Helper()
	tb, err := NewTable(c)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// tcpConv returns a TCP conversation from client c to server s: the
// packets named by steps, each "c:FLAGS" or "s:FLAGS" with flags of
// S, A, F, R, P.
func tcpConv(steps ...string) []pkt {
	var ps []pkt
	for _, st := range steps {
		p := pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 80}
		if st[0] == 's' {
			p = pkt{src: b4, dst: a4, proto: ProtoTCP, sport: 80, dport: 40000}
		}
		for _, c := range st[2:] {
			p.flags |= map[rune]uint8{'S': TCPSyn, 'A': TCPAck, 'F': TCPFin, 'R': TCPRst, 'P': 0x08}[c]
		}
		ps = append(ps, p)
	}
	return ps
}

func TestInitiator(t *testing.T) {
	tests := []struct {
		name    string
		steps   []string
		client  bool // a4 (the client) is the initiator
		syn     bool
		end     End
		packets [2]uint64
	}{
		{"syn first", []string{"c:S", "s:SA", "c:A", "c:PA", "s:A", "c:FA", "s:FA", "c:A"}, true, true, EndFIN, [2]uint64{5, 3}},
		{"syn-ack first: the receiver initiated", []string{"s:SA", "c:A", "s:A"}, true, true, EndOpen, [2]uint64{1, 2}},
		{"mid-stream: the first sender", []string{"s:PA", "c:A"}, false, false, EndOpen, [2]uint64{1, 1}},
		{"a later SYN decides", []string{"s:A", "c:S", "s:SA"}, true, true, EndOpen, [2]uint64{1, 2}},
		{"rst", []string{"c:S", "s:RA"}, true, true, EndRST, [2]uint64{1, 1}},
		{"one FIN is not the end", []string{"c:S", "s:SA", "c:FA", "s:A"}, true, true, EndOpen, [2]uint64{2, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb := newTable(t, nil)
			feed(tb, 1e18, tcpConv(tt.steps...), zeroBlock)
			tb.Flush()
			rs := tb.Records()
			if len(rs) != 1 {
				t.Fatalf("%d records, want 1: %+v", len(rs), rs)
			}
			r := rs[0]
			want := a4
			if !tt.client {
				want = b4
			}
			if r.Key.SrcAddr() != want {
				t.Errorf("initiator %v, want %v", r.Key.SrcAddr(), want)
			}
			if (r.Flags&RecordSYN != 0) != tt.syn || r.End != tt.end || r.Packets != tt.packets {
				t.Errorf("syn %v end %v packets %v, want %v %v %v", r.Flags&RecordSYN != 0, r.End, r.Packets, tt.syn, tt.end, tt.packets)
			}
			if r.TotalPackets() != uint64(len(tt.steps)) {
				t.Errorf("%d packets, want %d", r.TotalPackets(), len(tt.steps))
			}
		})
	}
}

func TestTCPFlagsAndBytes(t *testing.T) {
	tb := newTable(t, nil)
	ps := tcpConv("c:S", "s:SA", "c:A", "c:PA", "s:FA", "c:RA")
	ps[3].payload = 100
	feed(tb, 1e18, ps, zeroBlock)
	tb.Flush()
	r := tb.Records()[0]
	if r.TCPFlags != [2]uint8{TCPSyn | TCPAck | 0x08 | TCPRst, TCPSyn | TCPAck | TCPFin} {
		t.Errorf("flags %#x", r.TCPFlags)
	}
	if want := uint64(4*54 + 100); r.Bytes[0] != want || r.Captured[0] != want {
		t.Errorf("initiator bytes %d captured %d, want %d", r.Bytes[0], r.Captured[0], want)
	}
	if r.End != EndRST || r.First != 1e18 || r.Last != 1e18+5*int64(time.Millisecond) {
		t.Errorf("end %v first %d last %d", r.End, r.First, r.Last)
	}
}

func TestICMPPairs(t *testing.T) {
	tb := newTable(t, nil)
	feed(tb, 1e18, []pkt{
		{src: a4, dst: b4, proto: ProtoICMP, sport: 8},           // echo
		{src: b4, dst: a4, proto: ProtoICMP, sport: 0},           // echo reply: the same flow
		{src: b4, dst: a4, proto: ProtoICMP, sport: 3, dport: 3}, // unreachable: one way
		{src: a4, dst: b4, proto: ProtoICMP, sport: 3, dport: 3}, // the other way: another flow
		{src: a6, dst: b6, proto: ProtoICMPv6, sport: 135},
		{src: b6, dst: a6, proto: ProtoICMPv6, sport: 136},
	}, zeroBlock)
	if tb.Len() != 4 {
		t.Fatalf("%d flows, want 4", tb.Len())
	}
	tb.Flush()
	for _, r := range tb.Records() {
		if r.Key.Flags&FlagOneWay == 0 && r.Packets != [2]uint64{1, 1} {
			t.Errorf("%+v: packets %v, want a request and a reply", r.Key, r.Packets)
		}
	}
}

func TestEnds(t *testing.T) {
	udp := func(src bool) pkt {
		if src {
			return pkt{src: a4, dst: b4, proto: ProtoUDP, sport: 5000, dport: 53}
		}
		return pkt{src: b4, dst: a4, proto: ProtoUDP, sport: 53, dport: 5000}
	}
	t.Run("idle", func(t *testing.T) {
		tb := newTable(t, &Config{IdleTimeout: time.Second})
		feed(tb, 1e18, []pkt{udp(true), udp(false)}, zeroBlock)
		tb.Expire(1e18 + int64(time.Second))
		if len(tb.Records()) != 0 {
			t.Fatalf("ended before its idle timeout: %+v", tb.Records())
		}
		tb.Expire(1e18 + int64(2*time.Second))
		if rs := tb.Records(); len(rs) != 1 || rs[0].End != EndIdle || tb.Len() != 0 {
			t.Fatalf("records %+v, %d held", rs, tb.Len())
		}
	})
	t.Run("closed linger counts the last ACK", func(t *testing.T) {
		tb := newTable(t, nil)
		feed(tb, 1e18, tcpConv("c:S", "s:SA", "c:A", "c:FA", "s:FA", "c:A"), zeroBlock)
		if len(tb.Records()) != 0 {
			t.Fatalf("ended at once: %+v", tb.Records())
		}
		tb.Expire(1e18 + int64(time.Second) + int64(DefaultClosedTimeout))
		rs := tb.Records()
		if len(rs) != 1 || rs[0].End != EndFIN || rs[0].TotalPackets() != 6 {
			t.Fatalf("records %+v", rs)
		}
	})
	t.Run("port reuse after close", func(t *testing.T) {
		tb := newTable(t, nil)
		feed(tb, 1e18, tcpConv("c:S", "s:RA", "c:S", "s:SA"), zeroBlock)
		tb.Flush()
		rs := tb.Records()
		if len(rs) != 2 || rs[0].End != EndRST || rs[0].TotalPackets() != 2 || rs[1].End != EndOpen || rs[1].Part != 0 {
			t.Fatalf("records %+v", rs)
		}
	})
	t.Run("split", func(t *testing.T) {
		tb := newTable(t, &Config{SplitPackets: 3})
		feed(tb, 1e18, []pkt{udp(true), udp(false), udp(true), udp(true), udp(false)}, zeroBlock)
		tb.Flush()
		rs := tb.Records()
		if len(rs) != 2 || rs[0].End != EndSplit || rs[0].Packets != [2]uint64{2, 1} || rs[1].Part != 1 || rs[1].Packets != [2]uint64{1, 1} {
			t.Fatalf("records %+v", rs)
		}
		if rs[0].Key != rs[1].Key || rs[0].Key.CommunityID(0) != rs[1].Key.CommunityID(0) {
			t.Errorf("parts of one flow with other keys")
		}
	})
	t.Run("rotate", func(t *testing.T) {
		tb := newTable(t, nil)
		feed(tb, 1e18, []pkt{udp(true), udp(false)}, zeroBlock)
		tb.Rotate()
		if rs := tb.Records(); len(rs) != 1 || rs[0].End != EndOpen || tb.Len() != 1 {
			t.Fatalf("records %+v, %d held", rs, tb.Len())
		}
		tb.Clear()
		tb.Rotate() // nothing since: no record
		feed(tb, 1e18+int64(10*time.Second), []pkt{udp(false)}, zeroBlock)
		tb.Flush()
		rs := tb.Records()
		if len(rs) != 1 || rs[0].Part != 1 || rs[0].Packets != [2]uint64{0, 1} || rs[0].Key.SrcAddr() != a4 {
			t.Fatalf("after rotation: %+v", rs)
		}
	})
	t.Run("max flows", func(t *testing.T) {
		tb := newTable(t, &Config{MaxFlows: 2})
		var ps []pkt
		for i := range 5 {
			p := udp(true)
			p.sport = uint16(1000 + i)
			ps = append(ps, p)
		}
		feed(tb, 1e18, ps, zeroBlock)
		if tb.Len() != 2 || tb.Counters().Evicted != 3 {
			t.Fatalf("%d held, %d evicted", tb.Len(), tb.Counters().Evicted)
		}
		rs := tb.Records()
		for i, r := range rs {
			if r.End != EndEvicted || r.Key.SrcPort != uint16(1000+i) {
				t.Errorf("record %d: %+v, want port %d evicted (oldest first)", i, r, 1000+i)
			}
		}
	})
}

func TestBlocks(t *testing.T) {
	tests := []struct {
		blocks []uint32
		want   []BlockRun
	}{
		{[]uint32{0, 0, 1, 2}, []BlockRun{{0, 2}}},
		{[]uint32{3, 7, 8, 20}, []BlockRun{{3, 3}, {7, 8}, {20, 20}}},
		{[]uint32{1, 10, 20, 30, 31, 40}, []BlockRun{{1, 10}, {20, 20}, {30, 31}, {40, 40}}}, // the first of the closest gaps merged
		{[]uint32{1, 3, 5, 7, 100}, []BlockRun{{1, 3}, {5, 5}, {7, 7}, {100, 100}}},
		{[]uint32{9, 2, 5, 3, 4}, []BlockRun{{2, 5}, {9, 9}}},
		{[]uint32{1<<32 - 1, 0, 1<<32 - 2}, []BlockRun{{0, 0}, {1<<32 - 2, 1<<32 - 1}}},
	}
	for _, tt := range tests {
		var r Record
		for _, b := range tt.blocks {
			r.addBlock(b)
		}
		got := r.Runs()
		if len(got) != len(tt.want) {
			t.Errorf("%v: runs %v, want %v", tt.blocks, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%v: runs %v, want %v", tt.blocks, got, tt.want)
				break
			}
		}
		for _, b := range tt.blocks {
			in := false
			for _, run := range got {
				in = in || run.First <= b && b <= run.Last
			}
			if !in {
				t.Errorf("%v: block %d not in %v", tt.blocks, b, got)
			}
		}
	}
}

// TestAddAllocs: a packet of a flow the table holds allocates nothing.
func TestAddAllocs(t *testing.T) {
	if raceflag.Enabled {
		t.Skip("allocations differ under -race")
	}
	tb := newTable(t, &Config{SplitPackets: -1})
	ps := []pkt{
		{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 443, flags: TCPAck, payload: 1400},
		{src: b4, dst: a4, proto: ProtoTCP, sport: 443, dport: 40000, flags: TCPAck},
		{link: LinkRaw, src: a6, dst: b6, proto: ProtoUDP, sport: 5, dport: 6, ext6: []uint8{0}},
		{vlans: []uint16{5, 6}, src: a4, dst: b4, proto: ProtoICMP, sport: 8},
	}
	frames := make([][]byte, len(ps))
	for i, p := range ps {
		frames[i] = p.frame()
		tb.Add(0, p.lt(), 1, uint32(len(frames[i])), frames[i], 0)
	}
	ts := int64(2)
	allocs := testing.AllocsPerRun(1000, func() {
		for i, p := range ps {
			tb.Add(0, p.lt(), ts, uint32(len(frames[i])), frames[i], uint32(ts/100))
			ts++
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run, want 0", allocs)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{MaxFlows: -1}, {MaxFlows: 1<<24 + 1}, {IdleTimeout: -1}, {ClosedTimeout: -1}} {
		if _, err := NewTable(&c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// TestNonIP: frames that are not IP make one flow per ethertype and MAC
// pair, both ways, the first sender first.
func TestNonIP(t *testing.T) {
	frame := func(src, dst [6]byte, et uint16) []byte {
		b := append(append([]byte{}, dst[:]...), src[:]...)
		return append(b, byte(et>>8), byte(et), 0, 1, 8, 0, 6, 4, 0, 1)
	}
	tb := newTable(t, nil)
	for i, f := range [][]byte{
		frame(macA, macB, 0x0806), // ARP request
		frame(macB, macA, 0x0806), // reply: the same flow
		frame(macA, macB, 0x88cc), // LLDP: another
	} {
		tb.Add(0, LinkEthernet, 1e18+int64(i), uint32(len(f)), f, 0)
	}
	tb.Flush()
	rs := tb.Records()
	if len(rs) != 2 {
		t.Fatalf("%d records, want 2: %+v", len(rs), rs)
	}
	r := rs[0]
	if r.Key.EtherType == 0x88cc {
		r = rs[1]
	}
	if r.Key.Kind != KindLink || r.Packets != [2]uint64{1, 1} || [6]byte(r.Key.Src[:6]) != macA {
		t.Errorf("arp record %+v", r)
	}
}
