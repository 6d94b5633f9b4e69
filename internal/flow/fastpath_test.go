package flow

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestAddSameAsDecode holds Add's shortcut for a packet whose headers
// are the last packet's (headerOf) to what Decode and AddKey make of
// it: the same records and counters, over generated traffic whose
// frames come again, cut short, and with bytes of their headers
// changed (addresses, ports, protocol, header length, fragment offset,
// TCP flags, ethertype), with flows idling out between packets.
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
			}
			ts += int64(rng.IntN(1000))
			ins = append(ins, in{uint32(rng.IntN(2)), ts, g})
		}
	}
	fast, slow := newTable(t, nil), newTable(t, nil)
	for i, p := range ins {
		fast.Add(p.iface, LinkEthernet, p.ts, uint32(len(p.data)), p.data, uint32(i/50))
		var k Key
		pk := Decode(&k, LinkEthernet, p.iface, p.data)
		slow.AddKey(&k, pk, p.ts, uint32(len(p.data)), uint32(len(p.data)), uint32(i/50))
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
