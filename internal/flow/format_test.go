package flow

import (
	"bytes"
	"errors"
	"hash/crc32"
	"math"
	"testing"
	"time"
)

// sampleFile returns a flow file of records from a mix of traffic, the
// records, and the offsets where each record ends.
func sampleFile(t testing.TB, final bool) ([]byte, []Record, []int) {
	tb, err := NewTable(&Config{SplitPackets: 4})
	if err != nil {
		t.Fatal(err)
	}
	ps := append(tcpConv("c:S", "s:SA", "c:A", "c:PA", "s:PA", "c:FA", "s:FA", "c:A"),
		pkt{vlans: []uint16{7, 4000}, src: a6, dst: b6, proto: ProtoUDP, sport: 1, dport: 2},
		pkt{link: LinkSLL, src: a4, dst: b4, proto: 47},
		pkt{src: a4, dst: b4, proto: ProtoICMP, sport: 3, dport: 1},
		pkt{link: LinkRaw, src: a6, dst: b6, proto: ProtoUDP, ext6: []uint8{44}, fragOff: 9})
	feed(tb, 1.7e18, ps, func(i int) uint32 { return uint32(i * i) })
	arp := append(append(append([]byte{}, macB[:]...), macA[:]...), 0x08, 0x06, 1, 2, 3)
	tb.Add(1, LinkEthernet, 1.8e18, 60, arp, 99)
	tb.Add(2, 147, 1.8e18, 60, arp, 99)
	tb.Flush()
	var e Encoder
	b := e.AppendHeader(nil, "web1_20260101T000000.000Z.pcapng")
	var ends []int
	for i := range tb.Records() {
		b = e.AppendRecord(b, &tb.Records()[i])
		ends = append(ends, len(b))
	}
	if final {
		b = e.AppendEnd(b, 3)
	}
	return b, tb.Records(), ends
}

func TestFormatRoundTrip(t *testing.T) {
	b, recs, _ := sampleFile(t, true)
	f, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !f.Final || f.Evicted != 3 || f.Name != "web1_20260101T000000.000Z.pcapng" || len(f.Records) != len(recs) {
		t.Fatalf("file %+v", f)
	}
	kinds := map[Kind]bool{}
	for i := range recs {
		if f.Records[i] != recs[i] {
			t.Errorf("record %d: %+v, want %+v", i, f.Records[i], recs[i])
		}
		kinds[recs[i].Key.Kind] = true
	}
	if len(kinds) != 4 {
		t.Errorf("sample holds kinds %v, want all four", kinds)
	}
	t.Logf("%d records, %d bytes: %.1f bytes a record", len(recs), len(b), float64(len(b))/float64(len(recs)))
}

// TestFormatHostile: a file cut anywhere gives the records before the
// cut; a flipped byte anywhere is ErrDamaged (or a header error), never
// a wrong record.
func TestFormatHostile(t *testing.T) {
	b, recs, ends := sampleFile(t, true)
	var e0 Encoder
	head := len(e0.AppendHeader(nil, "web1_20260101T000000.000Z.pcapng"))
	bounds := map[int]bool{head: true}
	for _, n := range ends {
		bounds[n] = true
	}
	for n := range len(b) {
		f, err := Parse(b[:n])
		if n < head {
			if f != nil || !errors.Is(err, ErrDamaged) {
				t.Fatalf("header cut at %d: %v, %v", n, f, err)
			}
			continue
		}
		whole := 0
		for whole < len(ends) && ends[whole] <= n {
			whole++
		}
		if f == nil || len(f.Records) != whole || f.Final {
			t.Fatalf("cut at %d: %+v, want %d records", n, f, whole)
		}
		if bounds[n] != (err == nil) || err != nil && !errors.Is(err, ErrDamaged) {
			t.Fatalf("cut at %d (at a record's end: %v): %v", n, bounds[n], err)
		}
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x40
		f, err := Parse(c)
		if err == nil {
			t.Fatalf("byte %d flipped: no error", i)
		}
		if !errors.Is(err, ErrDamaged) && !errors.Is(err, ErrVersion) {
			t.Fatalf("byte %d flipped: %v", i, err)
		}
		if f != nil {
			for j, r := range f.Records {
				if r != recs[j] {
					t.Fatalf("byte %d flipped: record %d changed", i, j)
				}
			}
		}
	}
	// A version of the future, with a good checksum.
	var e Encoder
	h := e.AppendHeader(nil, "x")
	h[4] = Version + 1
	h = h[:len(h)-4]
	h = append(h, 0, 0, 0, 0)
	c := crc32.Checksum(h[:len(h)-4], castagnoli)
	h[len(h)-4], h[len(h)-3], h[len(h)-2], h[len(h)-1] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
	if _, err := Parse(h); !errors.Is(err, ErrVersion) {
		t.Errorf("version %d: %v, want ErrVersion", Version+1, err)
	}
}

// FuzzParse: any bytes parse without panic into records that encode
// back to the same bytes, with memory bounded by the input.
func FuzzParse(f *testing.F) {
	b, _, ends := sampleFile(f, true)
	f.Add(b)
	f.Add(b[:ends[2]])
	f.Add(b[:ends[2]+3])
	f.Add([]byte{})
	f.Add(b[:12])
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, err := Parse(b)
		if fl == nil {
			if err == nil {
				t.Fatal("no file and no error")
			}
			return
		}
		if len(fl.Records)*40 > len(b) {
			t.Fatalf("%d records from %d bytes", len(fl.Records), len(b))
		}
		var e Encoder
		out := e.AppendHeader(nil, fl.Name)
		for i := range fl.Records {
			out = e.AppendRecord(out, &fl.Records[i])
		}
		if fl.Final {
			out = e.AppendEnd(out, fl.Evicted)
		}
		if !bytes.HasPrefix(b, out) {
			t.Fatalf("records re-encoded differ from the bytes read")
		}
		if err == nil && fl.Final && len(out) != len(b) {
			t.Fatalf("final file with %d bytes after its end record", len(b)-len(out))
		}
	})
}

// TestRecordSize reports the bytes of typical records.
func TestRecordSize(t *testing.T) {
	for _, tt := range []struct {
		name string
		p    pkt
		max  int
	}{
		{"ipv4 tcp", pkt{src: a4, dst: b4, proto: ProtoTCP, sport: 40000, dport: 443, flags: TCPSyn}, 72},
		{"ipv6 udp", pkt{src: a6, dst: b6, proto: ProtoUDP, sport: 40000, dport: 53}, 96},
	} {
		tb := newTable(t, nil)
		p := tt.p
		for i := range 20 {
			b := p.frame()
			tb.Add(0, p.lt(), 1.7e18+int64(i)*int64(time.Millisecond), 1500, b, uint32(i/10))
		}
		tb.Flush()
		var e Encoder
		n := len(e.AppendRecord(nil, &tb.Records()[0]))
		t.Logf("%s: %d bytes", tt.name, n)
		if n > tt.max {
			t.Errorf("%s: %d bytes, want at most %d", tt.name, n, tt.max)
		}
	}
}

// TestFormatExtremeTimes: records of any packet times round-trip (a
// batch's times come from agents).
func TestFormatExtremeTimes(t *testing.T) {
	for _, tt := range [][2]int64{{math.MinInt64, math.MaxInt64}, {math.MinInt64, math.MinInt64}, {-1, 0}, {math.MaxInt64, math.MaxInt64}} {
		r := Record{First: tt[0], Last: tt[1], Packets: [2]uint64{1, 1}}
		var e Encoder
		f, err := Parse(e.AppendRecord(e.AppendHeader(nil, "x"), &r))
		if err != nil || len(f.Records) != 1 || f.Records[0] != r {
			t.Errorf("times %v: %v %+v", tt, err, f)
		}
	}
}
