package pcapfile

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// fuzzMaxPacket keeps FuzzReader's memory bounded.
const fuzzMaxPacket = 1 << 16

func fuzzSeeds() [][]byte {
	pcapUs := newPcap(le, magicMicro, 2, 65535, 1).rec(1, 2, 3, 5, []byte{1, 2, 3}).rec(4, 999999, 0, 0, nil).b
	pcapNs := newPcap(be, magicNano, 2, 96, 101).rec(1, 999999999, 4, 4, []byte{1, 2, 3, 4}).b
	var ng ngBuilder
	ng.section(le, opt{optSHBOS, []byte("Linux")})
	ng.idb(1, 65535, opt{optIfName, []byte("eth0")}, opt{optIfTsresol, []byte{9}})
	ng.epb(0, 1_700_000_000_000_000_001, 60, payload(60, 0), opt{1, []byte("c")})
	ng.block(blockISB, make([]byte, 12))
	ng.block(blockISB, append(make([]byte, 12), 4, 0, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 0, 1, 0, 'x', 0, 0, 0, 0, 0, 0, 0))
	ng.idb(113, 8, opt{optIfTsresol, []byte{0x80 | 20}}, opt{optIfTsoffset, ng.u64(10)})
	ng.epb(1, 3<<20, 5, payload(5, 1))
	ng.section(be).idb(101, 0, opt{optIfDescription, []byte("d")}).spb(7, payload(7, 2)).pb(0, 99, 3, payload(3, 3))
	maxPkt := newPcap(le, magicNano, 2, fuzzMaxPacket, 1).rec(1, 1, fuzzMaxPacket, fuzzMaxPacket, payload(fuzzMaxPacket, 4)).b
	overMax := newPcap(le, magicNano, 2, fuzzMaxPacket, 1).rec(1, 1, fuzzMaxPacket+1, fuzzMaxPacket+1, nil).b
	return [][]byte{
		pcapUs,
		pcapNs,
		ng.b,
		nil,
		pcapUs[:len(pcapUs)-2],
		ng.b[:len(ng.b)-7],
		append(bytes.Clone(pcapUs), "garbage"...),
		append(bytes.Clone(ng.b), "garbage!"...),
		maxPkt,
		overMax,
	}
}

// FuzzReader checks the Reader's invariants on arbitrary input:
//   - it never panics and reports bad input only as *FormatError carrying one
//     of the four sentinels, at an offset inside the input;
//   - no packet has len(Data) > MaxPacket or OrigLen < len(Data), and every
//     packet's interface is in Interfaces();
//   - Offset() never decreases and never passes the end of the input;
//   - input that reads cleanly to io.EOF survives a round trip through
//     NgWriter: the same interfaces and the same packets (timestamps,
//     interface, orig len, data).
func FuzzReader(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var r *Reader
		cfg := &ReaderConfig{MaxPacket: fuzzMaxPacket, OnStats: func(i int, _ InterfaceStats) {
			if i < 0 || i >= len(r.Interfaces()) {
				t.Errorf("statistics for interface %d of %d", i, len(r.Interfaces()))
			}
		}}
		r, err := NewReader(bytes.NewReader(in), cfg)
		if err != nil {
			checkFuzzErr(t, err, len(in))
			return
		}
		var pkts []Packet
		last := r.Offset()
		for {
			var p Packet
			err = r.ReadInto(&p)
			if off := r.Offset(); off < last || off > int64(len(in)) {
				t.Fatalf("Offset() went from %d to %d (input %d bytes)", last, off, len(in))
			}
			last = r.Offset()
			if err != nil {
				break
			}
			if len(p.Data) > fuzzMaxPacket {
				t.Fatalf("packet of %d bytes above MaxPacket", len(p.Data))
			}
			if p.OrigLen < uint32(len(p.Data)) {
				t.Fatalf("OrigLen %d below captured length %d", p.OrigLen, len(p.Data))
			}
			if p.Interface < 0 || p.Interface >= len(r.Interfaces()) {
				t.Fatalf("packet interface %d, %d interfaces known", p.Interface, len(r.Interfaces()))
			}
			p.Data = bytes.Clone(p.Data)
			pkts = append(pkts, p)
		}
		if err != io.EOF {
			checkFuzzErr(t, err, len(in))
			return
		}

		var buf bytes.Buffer
		w, err := NewNgWriter(&buf, SectionInfo{})
		if err != nil {
			t.Fatal(err)
		}
		ifaces := r.Interfaces()
		for _, ifc := range ifaces {
			if _, err := w.AddInterface(ifc); err != nil {
				t.Fatalf("AddInterface(%+v): %v", ifc, err)
			}
		}
		for _, p := range pkts {
			if err := w.WritePacket(p.Interface, p.Timestamp, p.OrigLen, p.Data); err != nil {
				t.Fatal(err)
			}
		}
		r2, err := NewReader(bytes.NewReader(buf.Bytes()), cfg)
		if err != nil {
			t.Fatalf("reading back: %v", err)
		}
		for i, want := range pkts {
			var p Packet
			if err := r2.ReadInto(&p); err != nil {
				t.Fatalf("reading back packet %d: %v", i, err)
			}
			if p.Timestamp != want.Timestamp || p.Interface != want.Interface || p.OrigLen != want.OrigLen || !bytes.Equal(p.Data, want.Data) {
				t.Fatalf("packet %d: read back {ts %d if %d orig %d len %d}, want {ts %d if %d orig %d len %d}", i,
					p.Timestamp, p.Interface, p.OrigLen, len(p.Data), want.Timestamp, want.Interface, want.OrigLen, len(want.Data))
			}
		}
		var p Packet
		if err := r2.ReadInto(&p); err != io.EOF {
			t.Fatalf("reading back: got %v after the last packet, want io.EOF", err)
		}
		got := r2.Interfaces()
		if len(got) != len(ifaces) {
			t.Fatalf("read back %d interfaces, want %d", len(got), len(ifaces))
		}
		for i := range got {
			if got[i] != ifaces[i] {
				t.Fatalf("interface %d: read back %+v, want %+v", i, got[i], ifaces[i])
			}
		}
	})
}

func checkFuzzErr(t *testing.T, err error, n int) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FormatError", err, err)
	}
	if fe.Offset < 0 || fe.Offset > int64(n) {
		t.Fatalf("error %q: offset outside the %d-byte input", err, n)
	}
	for _, s := range []error{ErrUnknownFormat, ErrTruncated, ErrTooLarge, ErrMalformed} {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("error %q wraps no sentinel", err)
}
