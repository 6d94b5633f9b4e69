package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

var (
	le = binary.LittleEndian
	be = binary.BigEndian
)

func TestReadPcap(t *testing.T) {
	d1, d2 := payload(60, 1), payload(1514, 2)
	tests := []struct {
		name  string
		order byteOrder
		magic uint32
		nano  bool
		// fraction fields written, and the timestamps they mean
		frac1, frac2 uint32
		ts1, ts2     int64
	}{
		{"little-endian microseconds", le, magicMicro, false, 123456, 999999,
			1_700_000_000_123_456_000, 1_700_000_001_999_999_000},
		{"big-endian microseconds", be, magicMicro, false, 123456, 999999,
			1_700_000_000_123_456_000, 1_700_000_001_999_999_000},
		{"little-endian nanoseconds", le, magicNano, true, 123456789, 999999999,
			1_700_000_000_123_456_789, 1_700_000_001_999_999_999},
		{"big-endian nanoseconds", be, magicNano, true, 123456789, 999999999,
			1_700_000_000_123_456_789, 1_700_000_001_999_999_999},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pb := newPcap(tt.order, tt.magic, 2, 65535, 1)
			pb.rec(1_700_000_000, tt.frac1, 60, 60, d1)
			pb.rec(1_700_000_001, tt.frac2, 1514, 9000, d2)
			pb.rec(0, 0, 0, 0, nil)
			r, pkts, err := readAll(t, pb.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if r.Nanosecond() != tt.nano {
				t.Errorf("Nanosecond() = %v, want %v", r.Nanosecond(), tt.nano)
			}
			wantIf := []Interface{{LinkType: 1, SnapLen: 65535}}
			if got := r.Interfaces(); !reflect.DeepEqual(got, wantIf) {
				t.Errorf("Interfaces() = %+v, want %+v", got, wantIf)
			}
			want := []Packet{
				{Timestamp: tt.ts1, OrigLen: 60, Data: d1},
				{Timestamp: tt.ts2, OrigLen: 9000, Data: d2},
				{Timestamp: 0, OrigLen: 0, Data: []byte{}},
			}
			comparePackets(t, pkts, want)
			if r.Offset() != int64(len(pb.b)) {
				t.Errorf("Offset() = %d, want %d", r.Offset(), len(pb.b))
			}
		})
	}
}

func TestReadPcapOrigLenBelowCaplen(t *testing.T) {
	pb := newPcap(le, magicNano, 2, 65535, 1).rec(1, 2, 10, 4, payload(10, 0))
	_, pkts, err := readAll(t, pb.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkts) != 1 || pkts[0].OrigLen != 10 {
		t.Fatalf("got %+v, want one packet with OrigLen 10", pkts)
	}
}

func TestReadPcapLinkTypeFCSBits(t *testing.T) {
	// The upper bits of the network field carry FCS information; the link
	// type is the low 16 bits.
	pb := newPcap(le, magicMicro, 2, 100, 0x1000_0000|105)
	r, _, err := readAll(t, pb.b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Interfaces()[0].LinkType; got != 105 {
		t.Errorf("LinkType = %d, want 105", got)
	}
}

func comparePackets(t *testing.T, got, want []Packet) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d packets, want %d", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Timestamp != w.Timestamp || g.Interface != w.Interface || g.OrigLen != w.OrigLen || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("packet %d: got {ts %d if %d orig %d len %d}, want {ts %d if %d orig %d len %d}",
				i, g.Timestamp, g.Interface, g.OrigLen, len(g.Data), w.Timestamp, w.Interface, w.OrigLen, len(w.Data))
		}
	}
}

func TestReadPcapng(t *testing.T) {
	d := func(n int) []byte { return payload(n, byte(n)) }
	const ts = 1_700_000_000_123_456_789
	tests := []struct {
		name    string
		build   func(nb *ngBuilder)
		ifaces  []Interface
		packets []Packet
	}{
		{
			name: "little-endian nanosecond",
			build: func(nb *ngBuilder) {
				nb.section(le).idb(1, 65535, opt{optIfName, []byte("eth0")}, opt{optIfDescription, []byte("uplink")}, opt{optIfTsresol, []byte{9}})
				nb.epb(0, ts, 100, d(60)).epb(0, ts+1, 3, d(3))
			},
			ifaces:  []Interface{{Name: "eth0", Description: "uplink", LinkType: 1, SnapLen: 65535}},
			packets: []Packet{{Timestamp: ts, OrigLen: 100, Data: d(60)}, {Timestamp: ts + 1, OrigLen: 3, Data: d(3)}},
		},
		{
			name: "big-endian default microsecond resolution",
			build: func(nb *ngBuilder) {
				nb.section(be).idb(101, 1500, opt{optIfName, []byte("tun0\x00\x00")})
				nb.epb(0, 1_700_000_000_123_456, 1500, d(1500))
			},
			ifaces:  []Interface{{Name: "tun0", LinkType: 101, SnapLen: 1500}},
			packets: []Packet{{Timestamp: 1_700_000_000_123_456_000, OrigLen: 1500, Data: d(1500)}},
		},
		{
			name: "multi-section global interface indexes",
			build: func(nb *ngBuilder) {
				nb.section(le).idb(1, 0, opt{optIfName, []byte("a0")}).idb(113, 0, opt{optIfName, []byte("a1")})
				nb.epb(1, 10, 4, d(4)).epb(0, 20, 5, d(5))
				nb.section(be).idb(101, 0, opt{optIfName, []byte("b0")}, opt{optIfTsresol, []byte{9}})
				nb.epb(0, 30, 6, d(6))
				nb.section(le).idb(1, 0, opt{optIfName, []byte("c0")}).idb(1, 0, opt{optIfName, []byte("c1")})
				nb.epb(1, 40, 7, d(7))
			},
			ifaces: []Interface{
				{Name: "a0", LinkType: 1}, {Name: "a1", LinkType: 113}, {Name: "b0", LinkType: 101},
				{Name: "c0", LinkType: 1}, {Name: "c1", LinkType: 1},
			},
			packets: []Packet{
				{Timestamp: 10_000, Interface: 1, OrigLen: 4, Data: d(4)},
				{Timestamp: 20_000, Interface: 0, OrigLen: 5, Data: d(5)},
				{Timestamp: 30, Interface: 2, OrigLen: 6, Data: d(6)},
				{Timestamp: 40_000, Interface: 4, OrigLen: 7, Data: d(7)},
			},
		},
		{
			name: "interface defined mid-file",
			build: func(nb *ngBuilder) {
				nb.section(le).idb(1, 0).epb(0, 1, 1, d(1)).idb(12, 0).epb(1, 2, 2, d(2))
			},
			ifaces:  []Interface{{LinkType: 1}, {LinkType: 12}},
			packets: []Packet{{Timestamp: 1000, OrigLen: 1, Data: d(1)}, {Timestamp: 2000, Interface: 1, OrigLen: 2, Data: d(2)}},
		},
		{
			name: "simple packet blocks",
			build: func(nb *ngBuilder) {
				nb.section(le).idb(1, 8).idb(1, 0)
				nb.spb(5, d(5))    // orig limits
				nb.spb(100, d(20)) // snaplen limits
				nb.spb(100, d(6))  // block room limits (room 8 with padding, snap 8, orig 100)
				nb.section(be).idb(1, 0)
				nb.spb(1000, d(12)) // snaplen 0: no limit, room limits
			},
			ifaces: []Interface{{LinkType: 1, SnapLen: 8}, {LinkType: 1}, {LinkType: 1}},
			packets: []Packet{
				{OrigLen: 5, Data: d(5)},
				{OrigLen: 100, Data: d(20)[:8]},
				{OrigLen: 100, Data: append(d(6), 0, 0)},
				{Interface: 2, OrigLen: 1000, Data: d(12)},
			},
		},
		{
			name: "obsolete packet block",
			build: func(nb *ngBuilder) {
				nb.section(be).idb(1, 0).idb(1, 0, opt{optIfTsresol, []byte{9}}).pb(1, ts, 77, d(33))
			},
			ifaces:  []Interface{{LinkType: 1}, {LinkType: 1}},
			packets: []Packet{{Timestamp: ts, Interface: 1, OrigLen: 77, Data: d(33)}},
		},
		{
			name: "timestamp resolutions and offsets",
			build: func(nb *ngBuilder) {
				nb.section(le)
				nb.idb(1, 0, opt{optIfTsresol, []byte{6}})
				nb.idb(1, 0, opt{optIfTsresol, []byte{3}})
				nb.idb(1, 0, opt{optIfTsresol, []byte{12}})
				nb.idb(1, 0, opt{optIfTsresol, []byte{0x80 | 20}})
				nb.idb(1, 0, opt{optIfTsresol, []byte{0x80 | 0}})
				nb.idb(1, 0, opt{optIfTsresol, []byte{9}}, opt{optIfTsoffset, nb.u64(1_000_000_000)})
				nb.idb(1, 0, opt{optIfTsoffset, nb.u64(uint64(1<<64 - 10))}) // -10 s, µs
				nb.epb(0, 1_700_000_000_123_456, 1, d(1))
				nb.epb(1, 1_700_000_000_123, 1, d(1))
				nb.epb(2, 123_456_789_123, 1, d(1))
				nb.epb(3, 1_700_000_000<<20|1<<19, 1, d(1)) // + 0.5 s
				nb.epb(4, 1_700_000_000, 1, d(1))
				nb.epb(5, 123_456_789, 1, d(1))
				nb.epb(6, 1_700_000_000_000_001, 1, d(1))
			},
			ifaces: []Interface{{LinkType: 1}, {LinkType: 1}, {LinkType: 1}, {LinkType: 1}, {LinkType: 1}, {LinkType: 1}, {LinkType: 1}},
			packets: []Packet{
				{Timestamp: 1_700_000_000_123_456_000, Interface: 0, OrigLen: 1, Data: d(1)},
				{Timestamp: 1_700_000_000_123_000_000, Interface: 1, OrigLen: 1, Data: d(1)},
				{Timestamp: 123_456_789, Interface: 2, OrigLen: 1, Data: d(1)},
				{Timestamp: 1_700_000_000_500_000_000, Interface: 3, OrigLen: 1, Data: d(1)},
				{Timestamp: 1_700_000_000_000_000_000, Interface: 4, OrigLen: 1, Data: d(1)},
				{Timestamp: 1_000_000_000_123_456_789, Interface: 5, OrigLen: 1, Data: d(1)},
				{Timestamp: 1_699_999_990_000_001_000, Interface: 6, OrigLen: 1, Data: d(1)},
			},
		},
		{
			name: "skipped blocks",
			build: func(nb *ngBuilder) {
				nb.section(le)
				nb.block(4, []byte{1, 0, 4, 0, 10, 0, 0, 1, 'h', 0, 0, 0, 0, 0, 0, 0}) // NRB
				nb.idb(1, 0)
				nb.block(blockISB, make([]byte, 12))
				nb.block(0x0A, make([]byte, 16))        // DSB
				nb.block(0x00000BAD, []byte("custom!")) // custom
				nb.block(0x40000BAD, nil)               // custom, empty body
				nb.block(0x12345678, make([]byte, 4000))
				nb.epb(0, 5, 9, d(9), opt{1, []byte("comment")}, opt{2, []byte{0, 0, 0, 1}})
				nb.block(blockISB, make([]byte, 12))
			},
			ifaces:  []Interface{{LinkType: 1}},
			packets: []Packet{{Timestamp: 5000, OrigLen: 9, Data: d(9)}},
		},
		{
			name: "orig len below captured len",
			build: func(nb *ngBuilder) {
				nb.section(le).idb(1, 0).epb(0, 0, 2, d(10))
			},
			ifaces:  []Interface{{LinkType: 1}},
			packets: []Packet{{OrigLen: 10, Data: d(10)}},
		},
		{
			name: "no packets",
			build: func(nb *ngBuilder) {
				nb.section(le, opt{optSHBOS, []byte("Linux")}).idb(1, 0)
			},
			ifaces: []Interface{{LinkType: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var nb ngBuilder
			tt.build(&nb)
			r, pkts, err := readAll(t, nb.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Nanosecond() {
				t.Error("Nanosecond() = false for pcapng")
			}
			if got := r.Interfaces(); !reflect.DeepEqual(got, tt.ifaces) {
				t.Errorf("Interfaces() = %+v, want %+v", got, tt.ifaces)
			}
			comparePackets(t, pkts, tt.packets)
			if r.Offset() != int64(len(nb.b)) {
				t.Errorf("Offset() = %d, want %d", r.Offset(), len(nb.b))
			}
		})
	}
}

func TestInterfacesGrow(t *testing.T) {
	var nb ngBuilder
	nb.section(le).idb(1, 0).epb(0, 1, 1, []byte{1}).idb(2, 0).epb(1, 1, 1, []byte{2})
	r, err := NewReader(bytes.NewReader(nb.b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(r.Interfaces()); n != 0 {
		t.Fatalf("before reading: %d interfaces, want 0", n)
	}
	var p Packet
	for i, want := range []int{1, 2} {
		if err := r.ReadInto(&p); err != nil {
			t.Fatal(err)
		}
		if n := len(r.Interfaces()); n != want {
			t.Errorf("after packet %d: %d interfaces, want %d", i, n, want)
		}
		if p.Interface >= len(r.Interfaces()) {
			t.Errorf("packet %d: interface %d not in Interfaces()", i, p.Interface)
		}
	}
}

func TestTSConv(t *testing.T) {
	tests := []struct {
		tsresol uint8
		ts      uint64
		want    uint64
	}{
		{9, 1_234_567_890_123_456_789, 1_234_567_890_123_456_789},
		{6, 1_700_000_000_000_001, 1_700_000_000_000_001_000},
		{0, 5, 5_000_000_000},
		{10, 1_234_567_891, 123_456_789},
		{12, 1_234_567_890_123_456_789, 1_234_567_890_123_456},
		{28, 1<<64 - 1, 1},
		{29, 1<<64 - 1, 0},
		{127, 1<<64 - 1, 0},
		{0x80 | 0, 7, 7_000_000_000},
		{0x80 | 1, 3, 1_500_000_000},
		{0x80 | 10, 1 << 10, 1_000_000_000},
		{0x80 | 30, 1<<30 + 1<<29, 1_500_000_000},
		{0x80 | 30, 1, 0}, // 0.93 ns rounds down
		{0x80 | 32, 1_700_000_000<<32 | 1<<31, 1_700_000_000_500_000_000},
		{0x80 | 63, 1<<63 | 1<<62, 1_500_000_000},
		{0x80 | 64, 1 << 63, 500_000_000},
		{0x80 | 70, 1 << 63, 7_812_500},
		{0x80 | 127, 1<<64 - 1, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("tsresol %#x ts %d", tt.tsresol, tt.ts), func(t *testing.T) {
			if got := newTSConv(tt.tsresol).ns(tt.ts); got != tt.want {
				t.Errorf("got %d ns, want %d", got, tt.want)
			}
		})
	}
}

func TestMalformed(t *testing.T) {
	type input struct {
		b   []byte
		off int64 // expected FormatError offset
	}
	pcapHdr := func() *pcapBuilder { return newPcap(le, magicMicro, 2, 65535, 1) }
	ng := func() *ngBuilder { return new(ngBuilder).section(le).idb(1, 0) }
	tests := []struct {
		name      string
		in        func() input
		maxPacket uint32
		atOpen    bool // error from NewReader rather than ReadInto
		want      error
	}{
		{"garbage header", func() input { return input{[]byte("this is not a capture file"), 0} }, 0, true, ErrUnknownFormat},
		{"empty input", func() input { return input{nil, 0} }, 0, true, ErrTruncated},
		{"short magic", func() input { return input{[]byte{0xd4, 0xc3}, 0} }, 0, true, ErrTruncated},
		{"truncated pcap header", func() input { return input{pcapHdr().b[:20], 0} }, 0, true, ErrTruncated},
		{"pcap version 1", func() input { return input{newPcap(le, magicMicro, 1, 65535, 1).b, 0} }, 0, true, ErrMalformed},
		{"truncated section header", func() input { return input{ng().b[:20], 0} }, 0, true, ErrTruncated},
		{"bad byte-order magic", func() input {
			b := ng().b
			b[8] = 0
			return input{b, 0}
		}, 0, true, ErrUnknownFormat},
		{"pcapng version 2", func() input {
			b := ng().b
			b[12] = 2
			return input{b, 0}
		}, 0, true, ErrMalformed},
		{"section header below minimum length", func() input {
			var nb ngBuilder
			nb.order = le
			nb.block(blockSHB, le.AppendUint32(nil, byteOrderMagic))
			return input{nb.b, 0}
		}, 0, true, ErrMalformed},

		{"truncated pcap record header", func() input {
			pb := pcapHdr().rec(1, 1, 4, 4, []byte{1, 2, 3, 4})
			off := pb.off()
			return input{append(pb.b, 1, 2, 3, 4, 5, 6, 7), off}
		}, 0, false, ErrTruncated},
		{"truncated pcap data", func() input {
			pb := pcapHdr()
			off := pb.off()
			return input{pb.rec(1, 1, 100, 100, payload(50, 0)).b, off}
		}, 0, false, ErrTruncated},
		{"pcap caplen over limit", func() input {
			pb := pcapHdr().rec(1, 1, 10, 10, payload(10, 0))
			off := pb.off()
			return input{pb.rec(1, 1, 1001, 1001, payload(1001, 0)).b, off}
		}, 1000, false, ErrTooLarge},
		{"pcap caplen over default limit", func() input {
			pb := pcapHdr()
			return input{pb.rec(1, 1, DefaultMaxPacket+1, DefaultMaxPacket+1, nil).b, 24}
		}, 0, false, ErrTooLarge},

		{"truncated block header", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.raw(6, 0, 0).b, off}
		}, 0, false, ErrTruncated},
		{"truncated enhanced packet block", func() input {
			nb := ng()
			off := nb.off()
			b := nb.epb(0, 1, 100, payload(100, 0)).b
			return input{b[:len(b)-10], off}
		}, 0, false, ErrTruncated},
		{"truncated skipped block", func() input {
			nb := ng()
			off := nb.off()
			b := nb.block(0x12345678, make([]byte, 1000)).b
			return input{b[:len(b)-1], off}
		}, 0, false, ErrTruncated},
		{"trailing garbage", func() input {
			nb := ng().epb(0, 1, 1, []byte{1})
			off := nb.off()
			return input{nb.raw('x', 'y', 'z').b, off}
		}, 0, false, ErrTruncated},
		{"pcapng caplen over limit", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.epb(0, 1, 1001, payload(1001, 0)).b, off}
		}, 1000, false, ErrTooLarge},
		{"pcapng block over limit", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.epb(0, 1, 10, payload(10, 0), opt{1, make([]byte, 60000)}, opt{1, make([]byte, 10000)}).b, off}
		}, 1000, false, ErrTooLarge},
		{"simple packet block over limit", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.spb(2000, payload(2000, 0)).b, off}
		}, 1000, false, ErrTooLarge},
		{"block length not a multiple of 4", func() input {
			nb := ng()
			off := nb.off()
			nb.epb(0, 1, 4, []byte{1, 2, 3, 4})
			le.PutUint32(nb.b[off+4:], 37)
			return input{nb.b, off}
		}, 0, false, ErrMalformed},
		{"block length below 12", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.raw(0x78, 0x56, 0x34, 0x12, 8, 0, 0, 0, 8, 0, 0, 0).b, off}
		}, 0, false, ErrMalformed},
		{"enhanced packet block below minimum length", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.block(blockEPB, make([]byte, 16)).b, off}
		}, 0, false, ErrMalformed},
		{"trailing length mismatch", func() input {
			nb := ng()
			off := nb.off()
			b := nb.epb(0, 1, 4, []byte{1, 2, 3, 4}).b
			b[len(b)-4]++
			return input{b, off}
		}, 0, false, ErrMalformed},
		{"skipped block trailing length mismatch", func() input {
			nb := ng()
			off := nb.off()
			b := nb.block(0x12345678, make([]byte, 8)).b
			b[len(b)-4] += 4
			return input{b, off}
		}, 0, false, ErrMalformed},
		{"enhanced packet block unknown interface", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.epb(1, 1, 1, []byte{1}).b, off}
		}, 0, false, ErrMalformed},
		{"interface id from previous section", func() input {
			nb := ng().section(be)
			off := nb.off()
			return input{nb.epb(0, 1, 1, []byte{1}).b, off}
		}, 0, false, ErrMalformed},
		{"enhanced packet block before any interface", func() input {
			nb := new(ngBuilder).section(le)
			off := nb.off()
			return input{nb.epb(0, 1, 1, []byte{1}).b, off}
		}, 0, false, ErrMalformed},
		{"packet block unknown interface", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.pb(3, 1, 1, []byte{1}).b, off}
		}, 0, false, ErrMalformed},
		{"simple packet block without interface", func() input {
			nb := new(ngBuilder).section(le)
			off := nb.off()
			return input{nb.spb(1, []byte{1}).b, off}
		}, 0, false, ErrMalformed},
		{"captured length exceeds block", func() input {
			nb := ng()
			off := nb.off()
			nb.epb(0, 1, 8, make([]byte, 8))
			le.PutUint32(nb.b[off+20:], 9)
			return input{nb.b, off}
		}, 0, false, ErrMalformed},
		{"interface option overruns block", func() input {
			nb := ng()
			off := nb.off()
			body := le.AppendUint16(nil, 1)
			body = le.AppendUint16(body, 0)
			body = le.AppendUint32(body, 0)
			body = le.AppendUint16(body, optIfName)
			body = le.AppendUint16(body, 9)
			body = append(body, "eth0"...)
			return input{nb.block(blockIDB, body).b, off}
		}, 0, false, ErrMalformed},
		{"if_tsresol with wrong length", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.idb(1, 0, opt{optIfTsresol, []byte{9, 9}}).b, off}
		}, 0, false, ErrMalformed},
		{"if_tsoffset with wrong length", func() input {
			nb := ng()
			off := nb.off()
			return input{nb.idb(1, 0, opt{optIfTsoffset, []byte{1, 2, 3, 4}}).b, off}
		}, 0, false, ErrMalformed},
		{"second section with bad byte-order magic", func() input {
			nb := ng()
			off := nb.off()
			b := nb.section(le).b
			b[off+8] = 0x99
			return input{b, off}
		}, 0, false, ErrMalformed},
		{"second section unsupported version", func() input {
			nb := ng()
			off := nb.off()
			b := nb.section(be).b
			b[off+12] = 0x7f
			return input{b, off}
		}, 0, false, ErrMalformed},
		{"truncated second section header", func() input {
			nb := ng()
			off := nb.off()
			b := nb.section(be).b
			return input{b[:off+10], off}
		}, 0, false, ErrTruncated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in()
			r, err := NewReader(bytes.NewReader(in.b), &ReaderConfig{MaxPacket: tt.maxPacket})
			if tt.atOpen {
				if r != nil {
					t.Errorf("NewReader returned a Reader with error %v", err)
				}
				checkFormatErr(t, err, tt.want, in.off)
				return
			}
			if err != nil {
				t.Fatalf("NewReader: %v", err)
			}
			var p Packet
			for err == nil {
				err = r.ReadInto(&p)
			}
			checkFormatErr(t, err, tt.want, in.off)
			if errors.Is(tt.want, ErrTruncated) && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("truncation error %q does not match io.ErrUnexpectedEOF", err)
			}
			if again := r.ReadInto(&p); again != err {
				t.Errorf("second ReadInto returned %v, want the same error %v", again, err)
			}
		})
	}
}

func TestFormatErrorMessage(t *testing.T) {
	pb := newPcap(le, magicMicro, 2, 65535, 1).rec(1, 1, 1210, 1210, payload(1210, 0))
	pb.rec(1, 1, 100, 100, payload(10, 0))
	_, _, err := readAll(t, pb.b, nil)
	const want = "offset 1250: truncated packet record: unexpected EOF"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
}

// errReader returns its data, then err.
type errReader struct {
	data []byte
	err  error
}

func (e *errReader) Read(p []byte) (int, error) {
	if len(e.data) == 0 {
		return 0, e.err
	}
	n := copy(p, e.data)
	e.data = e.data[n:]
	return n, nil
}

func TestSourceError(t *testing.T) {
	boom := errors.New("boom")
	pb := newPcap(le, magicMicro, 2, 65535, 1).rec(1, 1, 4, 4, []byte{1, 2, 3, 4}).rec(1, 1, 4, 4, []byte{1})
	tests := []struct {
		name   string
		data   []byte
		atOpen bool
		reads  int // successful reads before the error
	}{
		{"in header", pb.b[:10], true, 0},
		{"in record", pb.b, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewReader(&errReader{tt.data, boom}, nil)
			if !tt.atOpen {
				if err != nil {
					t.Fatal(err)
				}
				var p Packet
				for i := 0; i < tt.reads; i++ {
					if err := r.ReadInto(&p); err != nil {
						t.Fatalf("read %d: %v", i, err)
					}
				}
				err = r.ReadInto(&p)
			}
			if !errors.Is(err, boom) {
				t.Fatalf("error %v does not wrap the source error", err)
			}
			var fe *FormatError
			if errors.As(err, &fe) {
				t.Errorf("source error reported as *FormatError: %v", err)
			}
			if !strings.HasPrefix(err.Error(), "pcapfile: reading ") {
				t.Errorf("error %q lacks context", err)
			}
		})
	}
}

// oneByteReader returns at most one byte per Read, with (0, nil) reads in
// between, to exercise the buffering loop.
type oneByteReader struct {
	b      []byte
	toggle bool
}

func (o *oneByteReader) Read(p []byte) (int, error) {
	if o.toggle = !o.toggle; o.toggle {
		return 0, nil
	}
	if len(o.b) == 0 {
		return 0, io.EOF
	}
	p[0] = o.b[0]
	o.b = o.b[1:]
	return 1, nil
}

func TestSlowSource(t *testing.T) {
	var nb ngBuilder
	nb.section(le).idb(1, 0).epb(0, 1, 300, payload(300, 0)).block(0x999, make([]byte, 100)).epb(0, 2, 5, payload(5, 0))
	r, err := NewReader(&oneByteReader{b: nb.b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	var n int
	for {
		if err := r.ReadInto(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 2 || r.Offset() != int64(len(nb.b)) {
		t.Errorf("read %d packets to offset %d, want 2 to %d", n, r.Offset(), len(nb.b))
	}
}

func TestNoProgressSource(t *testing.T) {
	r, err := NewReader(io.MultiReader(bytes.NewReader(newPcap(le, magicMicro, 2, 1, 1).b), zeroReader{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	if err := r.ReadInto(&p); !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("error %v, want io.ErrNoProgress", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func TestOffsetAdvances(t *testing.T) {
	pb := newPcap(be, magicNano, 2, 65535, 1)
	var ends []int64
	for _, n := range []int{0, 1, 100, 9000} {
		pb.rec(1, 1, uint32(n), uint32(n), payload(n, 0))
		ends = append(ends, pb.off())
	}
	r, err := NewReader(bytes.NewReader(pb.b), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Offset() != 24 {
		t.Errorf("Offset() after header = %d, want 24", r.Offset())
	}
	var p Packet
	for i, want := range ends {
		if err := r.ReadInto(&p); err != nil {
			t.Fatal(err)
		}
		if r.Offset() != want {
			t.Errorf("Offset() after packet %d = %d, want %d", i, r.Offset(), want)
		}
	}
}

func TestReadPacketCopies(t *testing.T) {
	pb := newPcap(le, magicNano, 2, 65535, 1).rec(1, 1, 3, 3, []byte{1, 2, 3}).rec(1, 1, 3, 3, []byte{4, 5, 6})
	r, err := NewReader(bytes.NewReader(pb.b), nil)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := r.ReadPacket()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.ReadPacket(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p1.Data, []byte{1, 2, 3}) {
		t.Errorf("first packet changed to % x after the next read", p1.Data)
	}
}

func TestLargePacketGrowsBuffer(t *testing.T) {
	const n = 1 << 20 // DefaultMaxPacket, larger than the initial buffer
	tests := []struct {
		name string
		b    []byte
	}{
		{"pcap", newPcap(le, magicNano, 2, n, 1).rec(1, 1, n, n, payload(n, 3)).b},
		{"pcapng", new(ngBuilder).section(le).idb(1, 0).epb(0, 1, n, payload(n, 3)).b},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, pkts, err := readAll(t, tt.b, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(pkts) != 1 || !bytes.Equal(pkts[0].Data, payload(n, 3)) {
				t.Fatal("large packet not read back intact")
			}
		})
	}
}

func TestReadIntoAllocs(t *testing.T) {
	for _, size := range []int{64, 1500, 9000} {
		for _, f := range benchFormats {
			t.Run(fmt.Sprintf("%s/%d", f.name, size), func(t *testing.T) {
				head, body := f.build(size)
				r, err := NewReader(&repeatReader{head: head, body: body}, nil)
				if err != nil {
					t.Fatal(err)
				}
				var p Packet
				for range 1000 { // reach the steady state
					if err := r.ReadInto(&p); err != nil {
						t.Fatal(err)
					}
				}
				allocs := testing.AllocsPerRun(1000, func() {
					if err := r.ReadInto(&p); err != nil {
						t.Fatal(err)
					}
				})
				if allocs != 0 {
					t.Errorf("ReadInto allocates %v times per packet, want 0", allocs)
				}
				if len(p.Data) != size {
					t.Errorf("read %d bytes, want %d", len(p.Data), size)
				}
			})
		}
	}
}

// TestRefillKeepsData: with Refill, the Data of every packet returned
// stays as read after any number of later reads (each buffer handed out
// is fresh, never written again once replaced), through
// blocks that straddle the buffers' ends and one larger than a buffer,
// in both formats, from a source that gives a few bytes a read.
func TestRefillKeepsData(t *testing.T) {
	const big = ReaderBufferSize + 1000
	sizes := []int{0, 1, 60, 1514, 9000, big, 77, 0, 333}
	pc := newPcap(le, magicNano, 2, 1<<20, 1)
	ng := new(ngBuilder).section(le).idb(1, 0)
	var want [][]byte
	for i := range 600 {
		n := sizes[i%len(sizes)]
		if n == big && i > 10 {
			n = 1400
		}
		d := payload(n, byte(i))
		want = append(want, d)
		pc.rec(1, uint32(i), uint32(n), uint32(n), d)
		ng.epb(0, uint64(i), uint32(n), d)
	}
	for _, f := range []struct {
		name string
		b    []byte
	}{{"pcap", pc.b}, {"pcapng", ng.b}} {
		t.Run(f.name, func(t *testing.T) {
			var bufs [][]byte
			refill := func(n int) []byte {
				b := make([]byte, max(n, ReaderBufferSize))
				bufs = append(bufs, b)
				return b
			}
			r, err := NewReader(iotest.HalfReader(bytes.NewReader(f.b)), &ReaderConfig{Refill: refill, MaxPacket: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			var got [][]byte
			for {
				var p Packet
				err := r.ReadInto(&p)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, p.Data) // not copied
			}
			if len(got) != len(want) {
				t.Fatalf("%d packets, want %d", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("packet %d changed after later reads", i)
				}
			}
			if len(bufs) < 3 {
				t.Errorf("Refill asked %d times, want one a buffer's worth of bytes", len(bufs))
			}
		})
	}
	if _, err := NewReader(bytes.NewReader(pc.b), &ReaderConfig{Refill: func(int) []byte { return make([]byte, 10) }}); err == nil {
		t.Error("a short buffer from Refill was taken")
	}
}
