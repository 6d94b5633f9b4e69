package flow

import (
	"math/rand/v2"
	"testing"
)

// TestKeyIndex checks the index against a map under random inserts and
// removals, with hashes forced into few home slots so that runs wrap
// and deletions shift.
func TestKeyIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x keyIndex
	entries := make([]entry, 500)
	for i := range entries {
		entries[i].ckey.Iface = uint32(i)
		h := uint64(rng.IntN(8)) // few homes: long runs
		if rng.IntN(2) == 0 {
			h = 1<<32 | uint64(60+rng.IntN(4)) // near the end of 64 slots: runs wrap
		}
		entries[i].hash = h
	}
	in := map[int32]bool{}
	for step := range 20000 {
		i := int32(rng.IntN(len(entries)))
		if in[i] {
			x.remove(entries, i, entries[i].hash)
			delete(in, i)
		} else if len(in) < 40 || rng.IntN(2) == 0 {
			x.insert(entries, i, entries[i].hash)
			in[i] = true
		}
		if x.n != len(in) {
			t.Fatalf("step %d: %d held, want %d", step, x.n, len(in))
		}
		j := int32(rng.IntN(len(entries)))
		got, ok := x.lookup(entries, &entries[j].ckey, entries[j].hash)
		if ok != in[j] || ok && got != j {
			t.Fatalf("step %d: lookup %d: %d %v, want %v", step, j, got, ok, in[j])
		}
	}
}

// FuzzTable feeds random packets (and rotations, expiries, flushes)
// through a small table and checks that every packet is counted once in
// the records, whatever the bytes.
func FuzzTable(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add(pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 1, dport: 2, flags: TCPSyn}.frame())
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := NewTable(&Config{MaxFlows: 4, SplitPackets: 3, IdleTimeout: 10, ClosedTimeout: 5})
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(uint64(len(b)), 1))
		base := pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 1, dport: 2}.frame()
		var added, wire uint64
		for i := 0; i < len(b); i++ {
			// Packets of a few flows, their bytes changed by the input.
			p := append([]byte{}, base...)
			p[len(p)-7] = b[i] & 0x17 // tcp flags
			p[37] = b[i] >> 6         // destination port: 4 flows
			if b[i]&0x20 != 0 {
				p = append([]byte{}, b[i:]...)
			}
			w := uint32(len(p)) + uint32(b[i]&3)
			tb.Add(uint32(b[i]&1), []uint32{LinkEthernet, LinkRaw, LinkSLL}[rng.IntN(3)], int64(i)+int64(b[i]&7), w, p, uint32(i/4))
			added++
			wire += uint64(w)
			switch rng.IntN(20) {
			case 0:
				tb.Rotate()
			case 1:
				tb.Expire(int64(i + 20))
			}
		}
		tb.Flush()
		var pk, by uint64
		for _, r := range tb.Records() {
			if r.TotalPackets() == 0 || r.NRuns == 0 {
				t.Fatalf("empty record %+v", r)
			}
			pk += r.TotalPackets()
			by += r.TotalBytes()
		}
		if pk != added || by != wire || tb.Len() != 0 {
			t.Fatalf("records hold %d packets %d bytes, added %d %d; %d flows left", pk, by, added, wire, tb.Len())
		}
	})
}
