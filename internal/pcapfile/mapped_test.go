package pcapfile

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// TestMappedReader: NewMappedReader over any first part of a file, the
// rest read after it, returns what NewReader over the whole file returns
// (packets, interfaces, the error and its offset), whatever the buffer
// configuration, and never writes to the mapped part.
func TestMappedReader(t *testing.T) {
	const big = ReaderBufferSize + 1000
	sizes := []int{0, 1, 60, 1514, 9000, big, 77, 0, 333}
	pc := newPcap(le, magicNano, 2, 1<<20, 1)
	pcBE := newPcap(be, magicMicro, 2, 1<<20, 101)
	ng := new(ngBuilder).section(le).idb(1, 0).idb(101, 0)
	for i := range 300 {
		n := sizes[i%len(sizes)]
		if n == big && i > 10 {
			n = 1400
		}
		d := payload(n, byte(i))
		pc.rec(1, uint32(i), uint32(n), uint32(n)+3, d)
		pcBE.rec(2, uint32(i), uint32(n), uint32(n), d)
		ng.epb(uint32(i%2), uint64(i), uint32(n), d)
		if i == 150 {
			ng.section(be).idb(1, 0)
		}
	}
	inputs := []struct {
		name string
		b    []byte
	}{
		{"pcap", pc.b},
		{"pcap big-endian", pcBE.b},
		{"pcapng", ng.b},
		{"pcap cut in a record", pc.b[:len(pc.b)/2+7]},
		{"pcapng cut in a block", ng.b[:len(ng.b)/3+5]},
		{"pcap cut in the file header", pc.b[:10]},
		{"garbage", []byte("this is not a capture file at all")},
		{"empty", nil},
	}
	configs := []struct {
		name string
		cfg  func() *ReaderConfig
	}{
		{"no config", func() *ReaderConfig { return nil }},
		{"buffer", func() *ReaderConfig { return &ReaderConfig{Buffer: make([]byte, ReaderBufferSize), MaxPacket: 1 << 20} }},
		{"refill", func() *ReaderConfig {
			return &ReaderConfig{MaxPacket: 1 << 20, Refill: func(n int) []byte { return make([]byte, max(n, ReaderBufferSize)) }}
		}},
	}
	type result struct {
		pkts   []Packet
		ifaces []Interface
		err    string
	}
	read := func(r *Reader, err error) result {
		if err != nil {
			return result{err: "at open: " + err.Error()}
		}
		var res result
		for {
			p, err := r.ReadPacket()
			if err == io.EOF {
				break
			}
			if err != nil {
				res.err = err.Error()
				break
			}
			res.pkts = append(res.pkts, p)
		}
		res.ifaces = r.Interfaces()
		return res
	}
	for _, in := range inputs {
		for _, c := range configs {
			want := read(NewReader(bytes.NewReader(in.b), c.cfg()))
			if in.name == "pcap" && (want.err != "" || len(want.pkts) != 300) {
				t.Fatalf("reference read: %d packets, %q", len(want.pkts), want.err)
			}
			for _, k := range []int{0, 1, 4, 24, len(in.b) / 3, len(in.b)/2 + 1, len(in.b) - 1, len(in.b)} {
				if k < 0 || k > len(in.b) {
					continue
				}
				for _, rest := range []bool{true, false} {
					if !rest && k != len(in.b) {
						continue
					}
					name := fmt.Sprintf("%s/%s/mapped %d of %d", in.name, c.name, k, len(in.b))
					mapped := bytes.Clone(in.b[:k])
					var src io.Reader
					if rest {
						src = bytes.NewReader(in.b[k:])
					}
					got := read(NewMappedReader(mapped, src, c.cfg()))
					if !bytes.Equal(mapped, in.b[:k]) {
						t.Fatalf("%s: the mapped bytes were written", name)
					}
					if got.err != want.err {
						t.Fatalf("%s: error %q, want %q", name, got.err, want.err)
					}
					if len(got.pkts) != len(want.pkts) {
						t.Fatalf("%s: %d packets, want %d", name, len(got.pkts), len(want.pkts))
					}
					for i := range got.pkts {
						g, w := got.pkts[i], want.pkts[i]
						if g.Timestamp != w.Timestamp || g.OrigLen != w.OrigLen || g.Interface != w.Interface || !bytes.Equal(g.Data, w.Data) {
							t.Fatalf("%s: packet %d differs", name, i)
						}
					}
					if fmt.Sprint(got.ifaces) != fmt.Sprint(want.ifaces) {
						t.Fatalf("%s: interfaces %v, want %v", name, got.ifaces, want.ifaces)
					}
				}
			}
		}
	}
}

// TestMappedReaderPointsIntoData: packets wholly in the mapped part are
// returned in place, not copied.
func TestMappedReaderPointsIntoData(t *testing.T) {
	pc := newPcap(le, magicNano, 2, 65535, 1)
	for i := range 10 {
		pc.rec(1, uint32(i), 100, 100, payload(100, byte(i)))
	}
	r, err := NewMappedReader(pc.b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		var p Packet
		if err := r.ReadInto(&p); err != nil {
			t.Fatal(err)
		}
		if want := &pc.b[24+i*116+16]; &p.Data[0] != want {
			t.Fatalf("packet %d not in the mapped bytes", i)
		}
	}
	if err := r.ReadInto(new(Packet)); err != io.EOF {
		t.Fatalf("after the last packet: %v, want io.EOF", err)
	}
}
