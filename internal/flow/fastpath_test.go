package flow

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestAddSameAsDecode holds Add's shortcuts to the plain path: a packet
// whose headers are the last packet's (headerOf) is counted as Decode
// and AddKey count it, and the idle flows end as when every packet
// that moves the time checks them (Expire before each packet), over
// generated traffic whose frames come again, cut short, with bytes of
// their headers changed (addresses, ports, protocol, header length,
// fragment offset, TCP flags, ethertype), with flows idling out
// between packets, time going back now and then, and files rotating.
func TestAddSameAsDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(27, 5))
	type in struct {
		iface uint32
		ts    int64
		data  []byte
	}
	var ins []in
	for _, tp := range generate(3, 60) {
		f := tp.p.frame()
		lt := tp.p.lt()
		if lt != LinkEthernet {
			continue
		}
		ts := tp.ts
		for range 1 + rng.IntN(4) {
			g := append([]byte{}, f...)
			switch rng.IntN(6) {
			case 0:
				g = g[:rng.IntN(len(g)+1)]
			case 1:
				if len(g) > 12 {
					j := 12 + rng.IntN(min(len(g), 50)-12)
					g[j] ^= byte(1 << rng.IntN(8))
				}
			case 2:
				ts += int64(DefaultIdleTimeout) + 1
			case 3:
				ts += int64(DefaultClosedTimeout) + int64(rng.IntN(3)) - 1
			case 4:
				ts -= int64(rng.IntN(int(DefaultClosedTimeout)))
			}
			ts += int64(rng.IntN(1000))
			ins = append(ins, in{uint32(rng.IntN(2)), ts, g})
		}
	}
	// One address and one port both ways: the headers equal reversed.
	for i, p := range []pkt{
		{src: a4, dst: a4, proto: ProtoUDP, sport: 7, dport: 7, payload: 10},
		{src: a4, dst: a4, proto: ProtoUDP, sport: 7, dport: 7, payload: 10},
		{src: a4, dst: a4, proto: ProtoTCP, sport: 7, dport: 9, flags: TCPAck},
		{src: a4, dst: a4, proto: ProtoTCP, sport: 9, dport: 7, flags: TCPAck},
		{src: a4, dst: a4, proto: ProtoTCP, sport: 7, dport: 9, flags: TCPAck},
	} {
		ins = append(ins, in{0, ins[len(ins)-1].ts + int64(i), p.frame()})
	}
	fast, slow := newTable(t, nil), newTable(t, nil)
	for i, p := range ins {
		fast.Add(p.iface, LinkEthernet, p.ts, uint32(len(p.data)), p.data, uint32(i/50))
		var k Key
		pk := Decode(&k, LinkEthernet, p.iface, p.data)
		slow.Expire(p.ts)
		slow.AddKey(&k, pk, p.ts, uint32(len(p.data)), uint32(len(p.data)), uint32(i/50))
		if i%97 == 0 {
			fast.Rotate()
			slow.Rotate()
		}
	}
	fast.Flush()
	slow.Flush()
	if got, want := fast.Records(), slow.Records(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Add made %d records, Decode and AddKey %d; first difference:\n%s", len(got), len(want), firstDiff(got, want))
	}
	if fast.Counters() != slow.Counters() {
		t.Fatalf("counters: Add %+v, Decode and AddKey %+v", fast.Counters(), slow.Counters())
	}
	if len(fast.Records()) < 100 {
		t.Fatalf("only %d records: the traffic is too thin to hold anything", len(fast.Records()))
	}
}

func firstDiff(a, b []Record) string {
	for i := range min(len(a), len(b)) {
		if !reflect.DeepEqual(a[i], b[i]) {
			return fmt.Sprintf("record %d\nAdd:            %+v\nDecode, AddKey: %+v", i, a[i], b[i])
		}
	}
	return "one is a prefix of the other"
}

// TestExpireAt holds the table's skipping of idle checks (expireAt) to
// the checks at every packet that moves the time, where it can go
// wrong: a flow started in an empty table, a flow whose time goes back
// when a record restarts after Rotate, and a packet exactly at and one
// past the idle timeout.
func TestExpireAt(t *testing.T) {
	const s = int64(time.Second)
	idle := int64(DefaultIdleTimeout)
	type step struct {
		flow   int // a UDP flow of its own source port; -1: Rotate
		ts     int64
		ending int // records ended by idling before this packet
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a flow started in an empty table ends", []step{{0, s, 0}, {1, s + idle + 1, 1}}},
		{"at the timeout it stays, past it it ends", []step{{0, s, 0}, {1, s + idle, 0}, {2, s + idle + 1, 1}}},
		{"a record restarted earlier after Rotate ends by its own time", []step{
			{0, 100 * s, 0}, {0, 101 * s, 0}, {-1, 0, 0}, {0, 50 * s, 0}, {1, 50*s + idle + 1, 1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			fast, ref := newTable(t, nil), newTable(t, nil)
			idled := 0
			for i, st := range c.steps {
				if st.flow < 0 {
					fast.Rotate()
					ref.Rotate()
					continue
				}
				f := pkt{src: a4, dst: b4, proto: ProtoUDP, sport: uint16(1000 + st.flow), dport: 53, payload: 10}.frame()
				fast.Add(0, LinkEthernet, st.ts, uint32(len(f)), f, 0)
				var k Key
				p := Decode(&k, LinkEthernet, 0, f)
				ref.Expire(st.ts)
				ref.AddKey(&k, p, st.ts, uint32(len(f)), uint32(len(f)), 0)
				n := 0
				for _, r := range fast.Records() {
					if r.End == EndIdle {
						n++
					}
				}
				if n-idled != st.ending {
					t.Fatalf("step %d: %d records ended idle, want %d", i, n-idled, st.ending)
				}
				idled = n
				if !reflect.DeepEqual(fast.Records(), ref.Records()) {
					t.Fatalf("step %d: %s", i, firstDiff(fast.Records(), ref.Records()))
				}
			}
		})
	}
}

// TestAddRunsSameAsDecode holds Add's runs (packets of the last flow
// summed and added at the next other call) to the plain path, where
// runs are long: conversations both ways whose packets come in runs of
// up to 40, TCP data and ACKs with now and then a SYN, FIN or RST, index
// blocks changing inside runs, flows idling out between packets and
// time going back, files rotating, records split every few packets,
// and a table so small that flows are evicted.
func TestAddRunsSameAsDecode(t *testing.T) {
	for _, cfg := range []Config{{}, {SplitPackets: 5}, {SplitPackets: 2, MaxFlows: 2}, {SplitPackets: 1}, {SplitPackets: -1, MaxFlows: 3}} {
		t.Run(fmt.Sprintf("split=%d,max=%d", cfg.SplitPackets, cfg.MaxFlows), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(28, uint64(cfg.SplitPackets+10*cfg.MaxFlows)))
			convs := []pkt{
				{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 443},
				{src: a4, dst: b4, proto: ProtoTCP, sport: 40001, dport: 443},
				{src: b4, dst: a4, proto: ProtoUDP, sport: 53, dport: 5353},
				{src: a4, dst: a4, proto: ProtoUDP, sport: 7, dport: 7},
				{src: a4, dst: b4, proto: ProtoSCTP, sport: 9, dport: 9},
			}
			fast, slow := newTable(t, &cfg), newTable(t, &cfg)
			rep := &repeater{t: newTable(t, &cfg)} // Repeats and AddRepeats, as the store calls them
			var prev pkt
			cc := cfg
			var ts int64 = 1e18
			block, n := uint32(0), 0
			for range 400 {
				c := convs[rng.IntN(len(convs))]
				for range 1 + rng.IntN(40) {
					p := c
					if rng.IntN(5) == 0 { // the reply
						p.src, p.dst, p.sport, p.dport = p.dst, p.src, p.dport, p.sport
					}
					if p.proto == ProtoTCP {
						p.flags = []uint8{TCPAck, TCPAck | 0x08, TCPAck | 0x20, TCPAck | 0x40 | 0x80}[rng.IntN(4)] // PSH, URG, ECE and CWR
						if rng.IntN(30) == 0 {
							p.flags = []uint8{TCPSyn, TCPSyn | TCPAck, TCPFin | TCPAck, TCPRst}[rng.IntN(4)]
						}
					}
					p.payload = rng.IntN(1400)
					f := p.frame()
					switch rng.IntN(200) {
					case 0:
						ts += int64(DefaultIdleTimeout) + 1
					case 1:
						ts += int64(DefaultClosedTimeout)
					case 2:
						ts -= int64(time.Second)
					}
					ts += int64(rng.IntN(1000))
					if n++; n%37 == 0 {
						block++
					}
					capLen := len(f)
					if rng.IntN(10) == 0 && len(f) > 48 {
						capLen = 48 + rng.IntN(len(f)-47)
					}
					fast.Add(0, LinkEthernet, ts, uint32(len(f)), f[:capLen], block)
					same := n > 1 && p.src == prev.src && p.dst == prev.dst && p.sport == prev.sport && p.dport == prev.dport && p.proto == prev.proto && capLen >= 38
					prev = p
					rep.add(same, ts, uint32(len(f)), f[:capLen], block)
					var k Key
					pk := Decode(&k, LinkEthernet, 0, f[:capLen])
					slow.Expire(ts)
					slow.AddKey(&k, pk, ts, uint32(len(f)), uint32(capLen), block)
				}
				if rng.IntN(25) == 0 {
					fast.Rotate()
					slow.Rotate()
					rep.settle()
					rep.t.Rotate()
					block = 0
				}
			}
			rep.settle()
			if got, want := fast.Counters(), slow.Counters(); got != want {
				t.Fatalf("counters before the flush: Add %+v, Decode and AddKey %+v", got, want)
			}
			if got, want := rep.t.Counters(), slow.Counters(); got != want {
				t.Fatalf("counters before the flush: AddRepeats %+v, Decode and AddKey %+v", got, want)
			}
			fast.Flush()
			slow.Flush()
			rep.t.Flush()
			if got, want := fast.Records(), slow.Records(); !reflect.DeepEqual(got, want) {
				t.Fatalf("Add made %d records, Decode and AddKey %d; first difference:\n%s", len(got), len(want), firstDiff(got, want))
			}
			if got, want := rep.t.Records(), slow.Records(); !reflect.DeepEqual(got, want) {
				t.Fatalf("AddRepeats made %d records, Decode and AddKey %d; first difference:\n%s", len(got), len(want), firstDiff(got, want))
			}
			if rep.summed == 0 && (cfg.SplitPackets == 0 || cfg.SplitPackets > 2) { // a split every packet or two leaves no run
				t.Fatalf("no packet summed by the caller: the test does not reach AddRepeats")
			}
			if len(fast.Records()) < 20 {
				t.Fatalf("only %d records (%+v): the traffic is too thin to hold anything", len(fast.Records()), cc)
			}
		})
	}
}

// repeater feeds a table as the store does (internal/store's write
// path): a packet of the last packet's headers (same) is summed by a Run,
// the sums handed over before any other call to the table.
type repeater struct {
	t      *Table
	run    Run
	summed int
}

func (r *repeater) add(same bool, ts int64, wireLen uint32, data []byte, block uint32) {
	if r.run.Take(same, 0, block, ts, wireLen, data) {
		r.summed++
		return
	}
	r.settle()
	if !(same && r.t.AddRepeat(0, ts, wireLen, data, block)) {
		r.t.Add(0, LinkEthernet, ts, wireLen, data, block)
	}
	r.run.Renew(r.t)
}

func (r *repeater) settle() { r.run.Settle(r.t) }
