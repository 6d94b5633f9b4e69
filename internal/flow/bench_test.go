package flow

import (
	"testing"
)

// benchFrames returns the frames of a realistic mix (tshark_test.go's
// generator: TCP with data, UDP, ICMP, IPv4 and IPv6, VLANs) of n
// conversations, and their times.
func benchFrames(n int) ([][]byte, []int64) {
	pkts := generate(2, n)
	frames := make([][]byte, len(pkts))
	ts := make([]int64, len(pkts))
	for i, tp := range pkts {
		frames[i], ts[i] = tp.p.frame(), tp.ts
	}
	return frames, ts
}

// BenchmarkTable: ns and allocations per packet through a Table, the
// records collected as a store would (Clear every 1000 packets).
func BenchmarkTable(b *testing.B) {
	for _, conv := range []int{100, 10000} {
		frames, ts := benchFrames(conv)
		b.Run(map[int]string{100: "flows=100", 10000: "flows=10000"}[conv], func(b *testing.B) {
			tb, err := NewTable(nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			var bytes int64
			for _, f := range frames {
				bytes += int64(len(f))
			}
			b.SetBytes(bytes / int64(len(frames)))
			b.ResetTimer()
			// Time goes on across rounds, so that each round's flows are
			// new ones after the last round's ended.
			round := int64(0)
			for i := 0; i < b.N; {
				for j := 0; j < len(frames) && i < b.N; j++ {
					f := frames[j]
					tb.Add(0, LinkEthernet, ts[j]+round, uint32(len(f)), f, uint32(j/1000))
					if i%1000 == 0 {
						tb.Clear()
					}
					i++
				}
				round += 1e12
			}
		})
	}
}

// BenchmarkDecode: the key of one packet.
func BenchmarkDecode(b *testing.B) {
	frames, _ := benchFrames(100)
	b.ReportAllocs()
	var k Key
	for i := 0; i < b.N; i++ {
		Decode(&k, LinkEthernet, 0, frames[i%len(frames)])
	}
}

// BenchmarkCommunityID: one id, as a reader computes it per record.
func BenchmarkCommunityID(b *testing.B) {
	var k Key
	Decode(&k, LinkEthernet, 0, pkt{src: a6, dst: b6, proto: ProtoTCP, sport: 1, dport: 2}.frame())
	buf := make([]byte, 0, CommunityIDLen)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf = k.AppendCommunityID(buf[:0], 0)
	}
}

// BenchmarkParse: records read back from a flow file.
func BenchmarkParse(b *testing.B) {
	frames, ts := benchFrames(2000)
	tb, _ := NewTable(nil)
	for j, f := range frames {
		tb.Add(0, LinkEthernet, ts[j], uint32(len(f)), f, uint32(j/1000))
	}
	tb.Flush()
	var e Encoder
	buf := e.AppendHeader(nil, "x")
	for i := range tb.Records() {
		buf = e.AppendRecord(buf, &tb.Records()[i])
	}
	n := len(tb.Records())
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	b.ResetTimer()
	var r Record
	for i := 0; i < b.N; i++ {
		d, err := NewDecoder(buf)
		if err != nil {
			b.Fatal(err)
		}
		for d.Next(&r) {
		}
		if d.Err() != nil {
			b.Fatal(d.Err())
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
}

// BenchmarkTableKnown: the steady path, packets of flows the table holds
// (1 000 TCP flows, their packets interleaved), as most packets of a
// capture are.
func BenchmarkTableKnown(b *testing.B) {
	var frames [][]byte
	for i := range 1000 {
		p := pkt{src: a4, dst: b4, proto: ProtoTCP, sport: uint16(10000 + i), dport: 443, flags: TCPAck, payload: 1400}
		frames = append(frames, p.frame())
		p.src, p.dst, p.sport, p.dport, p.payload = b4, a4, 443, uint16(10000+i), 0
		frames = append(frames, p.frame())
	}
	tb, err := NewTable(&Config{SplitPackets: -1})
	if err != nil {
		b.Fatal(err)
	}
	for j, f := range frames {
		tb.Add(0, LinkEthernet, int64(j), uint32(len(f)), f, 0)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		f := frames[(i*7919)%len(frames)]
		tb.Add(0, LinkEthernet, int64(len(frames)+i), uint32(len(f)), f, uint32(i>>16))
	}
}

// BenchmarkTableOneFlow: the pipeline benchmark's traffic (internal/gen
// Frame: one UDP flow, one way) and a TCP flow both ways, long flows as
// most packets of real traffic are: the table's last-flow path.
func BenchmarkTableOneFlow(b *testing.B) {
	udp := []byte(pkt{src: a4, dst: b4, proto: ProtoUDP, sport: 40000, dport: 5555, payload: 22}.frame())
	fwd := pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 443, flags: TCPAck, payload: 1400}
	rev := pkt{src: b4, dst: a4, proto: ProtoTCP, sport: 443, dport: 40000, flags: TCPAck}
	for _, c := range []struct {
		name   string
		frames [][]byte
	}{
		{"udp", [][]byte{udp}},
		{"tcp-both-ways", [][]byte{fwd.frame(), fwd.frame(), rev.frame()}},
	} {
		b.Run(c.name, func(b *testing.B) {
			tb, err := NewTable(nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				f := c.frames[i%len(c.frames)]
				tb.Add(0, LinkEthernet, int64(i)*1000, uint32(len(f)), f, uint32(i>>10))
				if i%1000 == 0 {
					tb.Clear()
				}
			}
		})
		// The store's way: the index builder found the packet's headers
		// the last packet's (one-way flows only).
		if len(c.frames) > 1 {
			continue
		}
		b.Run(c.name+"-repeat", func(b *testing.B) {
			tb, err := NewTable(nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			f := c.frames[0]
			for i := 0; i < b.N; i++ {
				ts, block := int64(i)*1000, uint32(i>>10)
				if i == 0 || !tb.AddRepeat(0, ts, uint32(len(f)), f, block) {
					tb.Add(0, LinkEthernet, ts, uint32(len(f)), f, block)
				}
				if i%1000 == 0 {
					tb.Clear()
				}
			}
		})
	}
}
