package pcapfile

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

var roundTripSizes = []int{0, 1, 2, 3, 4, 5, 60, 64, 576, 1500, 9000, 65535}

func TestNgWriterRoundTrip(t *testing.T) {
	ifaces := []Interface{
		{Name: "eth0", Description: "uplink port", LinkType: 1, SnapLen: 65535},
		{LinkType: 101},
		{Name: "any", LinkType: 113, SnapLen: 262144},
		{Name: "wlan0", Description: "x", LinkType: 127, SnapLen: 9000},
	}
	tests := []struct {
		name  string
		si    SectionInfo
		stats bool
	}{
		{"no section options", SectionInfo{}, false},
		{"section options and stats", SectionInfo{Hardware: "x86_64", OS: "Linux 6.1", UserAppl: "pcapsync test", Comment: "round trip"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewNgWriter(&buf, tt.si)
			if err != nil {
				t.Fatal(err)
			}
			for i, ifc := range ifaces {
				idx, err := w.AddInterface(ifc)
				if err != nil {
					t.Fatal(err)
				}
				if idx != i {
					t.Fatalf("AddInterface returned %d, want %d", idx, i)
				}
			}
			var want []Packet
			for i, size := range roundTripSizes {
				p := Packet{
					Timestamp: 1_700_000_000_000_000_000 + int64(i)*1_000_000_007 + int64(i),
					Interface: i % len(ifaces),
					OrigLen:   uint32(size + i),
					Data:      payload(size, byte(i)),
				}
				if err := w.WritePacket(p.Interface, p.Timestamp, p.OrigLen, p.Data); err != nil {
					t.Fatal(err)
				}
				want = append(want, p)
				if tt.stats {
					st := InterfaceStats{Timestamp: p.Timestamp, IfRecv: uint64(i), HaveIfRecv: true, Comment: "s"}
					if err := w.WriteStats(p.Interface, st); err != nil {
						t.Fatal(err)
					}
				}
			}
			if w.Written() != int64(buf.Len()) {
				t.Errorf("Written() = %d, buffer holds %d", w.Written(), buf.Len())
			}
			r, got, err := readAll(t, buf.Bytes(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.Interfaces(), ifaces) {
				t.Errorf("Interfaces() = %+v, want %+v", r.Interfaces(), ifaces)
			}
			comparePackets(t, got, want)
		})
	}
}

// walkBlocks splits little-endian pcapng into blocks, checking lengths.
func walkBlocks(t *testing.T, b []byte) (types []uint32, bodies [][]byte) {
	t.Helper()
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("%d stray bytes at the end", len(b))
		}
		total := int(le.Uint32(b[4:]))
		if total%4 != 0 || total < 12 || total > len(b) || int(le.Uint32(b[total-4:])) != total {
			t.Fatalf("bad block length %d", total)
		}
		types = append(types, le.Uint32(b))
		bodies = append(bodies, b[8:total-4])
		b = b[total:]
	}
	return types, bodies
}

// parseOpts decodes little-endian options, requiring padding and
// opt_endofopt when any option is present.
func parseOpts(t *testing.T, b []byte) map[uint16][]byte {
	t.Helper()
	m := map[uint16][]byte{}
	if len(b) == 0 {
		return m
	}
	for {
		if len(b) < 4 {
			t.Fatal("options end without opt_endofopt")
		}
		code, n := le.Uint16(b), int(le.Uint16(b[2:]))
		if code == 0 {
			if n != 0 || len(b) != 4 {
				t.Fatalf("opt_endofopt length %d with %d bytes left", n, len(b))
			}
			return m
		}
		padded := (n + 3) &^ 3
		if 4+padded > len(b) {
			t.Fatalf("option %d overruns", code)
		}
		if !bytes.Equal(b[4+n:4+padded], make([]byte, padded-n)) {
			t.Errorf("option %d padding not zero", code)
		}
		m[code] = b[4 : 4+n]
		b = b[4+padded:]
	}
}

func TestNgWriterBlocks(t *testing.T) {
	u64 := func(v uint64) []byte { return le.AppendUint64(nil, v) }
	tests := []struct {
		name     string
		si       SectionInfo
		ifc      Interface
		st       InterfaceStats
		shbOpts  map[uint16][]byte
		idbOpts  map[uint16][]byte
		isbOpts  map[uint16][]byte
		dataSize int
	}{
		{
			name:     "everything set",
			si:       SectionInfo{Hardware: "hw", OS: "Linux", UserAppl: "pcapsync", Comment: "hello"},
			ifc:      Interface{Name: "eth0", Description: "desc1", LinkType: 1, SnapLen: 1500},
			st:       InterfaceStats{Timestamp: 5, IfRecv: 1, IfDrop: 2, OsDrop: 3, UsrDeliv: 4, HaveIfRecv: true, HaveIfDrop: true, HaveOsDrop: true, HaveUsrDeliv: true, Comment: "c"},
			shbOpts:  map[uint16][]byte{1: []byte("hello"), 2: []byte("hw"), 3: []byte("Linux"), 4: []byte("pcapsync")},
			idbOpts:  map[uint16][]byte{2: []byte("eth0"), 3: []byte("desc1"), 9: {9}},
			isbOpts:  map[uint16][]byte{1: []byte("c"), 4: u64(1), 5: u64(2), 7: u64(3), 8: u64(4)},
			dataSize: 5,
		},
		{
			name:     "nothing set",
			ifc:      Interface{LinkType: 101},
			shbOpts:  map[uint16][]byte{},
			idbOpts:  map[uint16][]byte{9: {9}},
			isbOpts:  map[uint16][]byte{},
			dataSize: 0,
		},
		{
			name:     "some counters",
			ifc:      Interface{Name: "abc", LinkType: 1},
			st:       InterfaceStats{IfDrop: 7, OsDrop: 1 << 40, HaveOsDrop: true},
			shbOpts:  map[uint16][]byte{},
			idbOpts:  map[uint16][]byte{2: []byte("abc"), 9: {9}},
			isbOpts:  map[uint16][]byte{7: u64(1 << 40)},
			dataSize: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewNgWriter(&buf, tt.si)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.AddInterface(tt.ifc); err != nil {
				t.Fatal(err)
			}
			const ts = 0x0123_4567_89ab_cdef
			if err := w.WritePacket(0, ts, 1000, payload(tt.dataSize, 0)); err != nil {
				t.Fatal(err)
			}
			if err := w.WriteStats(0, tt.st); err != nil {
				t.Fatal(err)
			}
			types, bodies := walkBlocks(t, buf.Bytes())
			if want := []uint32{blockSHB, blockIDB, blockEPB, blockISB}; !reflect.DeepEqual(types, want) {
				t.Fatalf("block types %x, want %x", types, want)
			}
			shb, idb, epb, isb := bodies[0], bodies[1], bodies[2], bodies[3]
			if le.Uint32(shb) != byteOrderMagic || le.Uint16(shb[4:]) != 1 || le.Uint16(shb[6:]) != 0 || le.Uint64(shb[8:]) != ^uint64(0) {
				t.Errorf("section header fields % x", shb[:16])
			}
			if got := parseOpts(t, shb[16:]); !reflect.DeepEqual(got, tt.shbOpts) {
				t.Errorf("SHB options %v, want %v", got, tt.shbOpts)
			}
			if le.Uint16(idb) != tt.ifc.LinkType || le.Uint32(idb[4:]) != tt.ifc.SnapLen {
				t.Errorf("IDB fields % x", idb[:8])
			}
			if got := parseOpts(t, idb[8:]); !reflect.DeepEqual(got, tt.idbOpts) {
				t.Errorf("IDB options %v, want %v", got, tt.idbOpts)
			}
			if le.Uint32(epb) != 0 || le.Uint32(epb[4:]) != ts>>32 || le.Uint32(epb[8:]) != ts&0xffffffff ||
				le.Uint32(epb[12:]) != uint32(tt.dataSize) || le.Uint32(epb[16:]) != 1000 {
				t.Errorf("EPB fields % x", epb[:20])
			}
			if len(epb) != 20+(tt.dataSize+3)&^3 {
				t.Errorf("EPB body %d bytes for %d data bytes", len(epb), tt.dataSize)
			}
			if !bytes.Equal(epb[20+tt.dataSize:], make([]byte, len(epb)-20-tt.dataSize)) {
				t.Error("EPB padding not zero")
			}
			if le.Uint32(isb) != 0 || int64(le.Uint64(isb[4:])>>32|le.Uint64(isb[4:])<<32) != tt.st.Timestamp {
				t.Errorf("ISB fields % x", isb[:12])
			}
			if got := parseOpts(t, isb[12:]); !reflect.DeepEqual(got, tt.isbOpts) {
				t.Errorf("ISB options %v, want %v", got, tt.isbOpts)
			}
		})
	}
}

// failWriter accepts limit bytes, then fails (or writes short).
type failWriter struct {
	limit int
	short bool
}

var errWrite = errors.New("disk full")

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) <= f.limit {
		f.limit -= len(p)
		return len(p), nil
	}
	n := f.limit
	f.limit = 0
	if f.short {
		return n, nil
	}
	return n, errWrite
}

func TestNgWriterErrors(t *testing.T) {
	long := strings.Repeat("x", 1<<16)
	tests := []struct {
		name string
		run  func(w *NgWriter) error
		want error
	}{
		{"packet on negative interface", func(w *NgWriter) error { return w.WritePacket(-1, 0, 0, nil) }, ErrUnknownInterface},
		{"packet on unknown interface", func(w *NgWriter) error { return w.WritePacket(1, 0, 0, nil) }, ErrUnknownInterface},
		{"stats on unknown interface", func(w *NgWriter) error { return w.WriteStats(7, InterfaceStats{}) }, ErrUnknownInterface},
		{"interface name too long", func(w *NgWriter) error { _, err := w.AddInterface(Interface{Name: long}); return err }, ErrTooLarge},
		{"interface description too long", func(w *NgWriter) error { _, err := w.AddInterface(Interface{Description: long}); return err }, ErrTooLarge},
		{"stats comment too long", func(w *NgWriter) error { return w.WriteStats(0, InterfaceStats{Comment: long}) }, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			w, err := NewNgWriter(&buf, SectionInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.AddInterface(Interface{LinkType: 1}); err != nil {
				t.Fatal(err)
			}
			before := buf.Len()
			if err := tt.run(w); !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if buf.Len() != before {
				t.Errorf("failed call wrote %d bytes", buf.Len()-before)
			}
			// A rejected argument is not sticky.
			if err := w.WritePacket(0, 1, 1, []byte{1}); err != nil {
				t.Errorf("writer unusable after rejected argument: %v", err)
			}
		})
	}
	t.Run("section comment too long", func(t *testing.T) {
		if _, err := NewNgWriter(io.Discard, SectionInfo{Comment: long}); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error %v, want ErrTooLarge", err)
		}
	})
}

func TestNgWriterWriteErrorSticky(t *testing.T) {
	tests := []struct {
		name  string
		short bool
		want  error
	}{
		{"error", false, errWrite},
		{"short write", true, io.ErrShortWrite},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fw := &failWriter{limit: 200, short: tt.short}
			w, err := NewNgWriter(fw, SectionInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.AddInterface(Interface{LinkType: 1}); err != nil {
				t.Fatal(err)
			}
			err = w.WritePacket(0, 1, 500, payload(500, 0))
			if !errors.Is(err, tt.want) {
				t.Fatalf("error %v, want %v", err, tt.want)
			}
			if w.Written() != 200 {
				t.Errorf("Written() = %d, want 200", w.Written())
			}
			if err2 := w.WritePacket(0, 1, 1, []byte{1}); err2 != err {
				t.Errorf("next WritePacket returned %v, want sticky %v", err2, err)
			}
			if _, err2 := w.AddInterface(Interface{}); err2 != err {
				t.Errorf("AddInterface returned %v, want sticky %v", err2, err)
			}
			if err2 := w.WriteStats(0, InterfaceStats{}); err2 != err {
				t.Errorf("WriteStats returned %v, want sticky %v", err2, err)
			}
		})
	}
	t.Run("section header", func(t *testing.T) {
		if _, err := NewNgWriter(&failWriter{limit: 3}, SectionInfo{}); !errors.Is(err, errWrite) {
			t.Fatalf("error %v, want %v", err, errWrite)
		}
	})
}

func TestNgWriterAllocs(t *testing.T) {
	for _, size := range []int{0, 64, 1500, 9000, 65535} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			w, err := NewNgWriter(io.Discard, SectionInfo{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.AddInterface(Interface{LinkType: 1}); err != nil {
				t.Fatal(err)
			}
			data := payload(size, 0)
			ts := int64(1_700_000_000_000_000_000)
			allocs := testing.AllocsPerRun(1000, func() {
				ts++
				if err := w.WritePacket(0, ts, uint32(size), data); err != nil {
					t.Fatal(err)
				}
			})
			if allocs != 0 {
				t.Errorf("WritePacket allocates %v times per packet, want 0", allocs)
			}
		})
	}
}

func TestNgWriterNegativeTimestamp(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewNgWriter(&buf, SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(Interface{LinkType: 1}); err != nil {
		t.Fatal(err)
	}
	for _, ts := range []int64{-1, -1_000_000_000_123, 1<<63 - 1, -1 << 63} {
		if err := w.WritePacket(0, ts, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, pkts, err := readAll(t, buf.Bytes(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int64{-1, -1_000_000_000_123, 1<<63 - 1, -1 << 63} {
		if pkts[i].Timestamp != want {
			t.Errorf("packet %d: timestamp %d, want %d", i, pkts[i].Timestamp, want)
		}
	}
}

// TestNgWriterEmptyNameResolution: the empty Name Resolution Block is 16
// bytes (type 4, no record but the end), counted in Written, and a
// reader passes over it, before the first interface and between packets.
func TestNgWriterEmptyNameResolution(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewNgWriter(&buf, SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	shb := w.Written()
	if err := w.WriteEmptyNameResolution(); err != nil {
		t.Fatal(err)
	}
	want := []byte{4, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0}
	if got := buf.Bytes()[shb:]; !bytes.Equal(got, want) || w.Written() != shb+16 {
		t.Fatalf("block % x (written %d), want % x", got, w.Written()-shb, want)
	}
	idx, err := w.AddInterface(Interface{Name: "eth0", LinkType: 1, SnapLen: 1500})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := w.WritePacket(idx, int64(i), 60, make([]byte, 60)); err != nil {
			t.Fatal(err)
		}
		if err := w.WriteEmptyNameResolution(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewReader(&buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	n := 0
	for r.ReadInto(&p) == nil {
		n++
	}
	if n != 2 {
		t.Errorf("read %d packets, want 2", n)
	}
}

// TestNgWriterBuffered: over a bufio.Writer (the store's case, whose
// packets without options skip the interface call per piece) and over
// a Reserver (a query's output: packets built in its buffer) the bytes
// and the count are those written to a plain writer, for every
// padding, with and without options; and an error of the writer under
// the buffer is sticky, counted as written up to it.
func TestNgWriterBuffered(t *testing.T) {
	write := func(dst io.Writer) (*NgWriter, error) {
		w, err := NewNgWriter(dst, SectionInfo{OS: "x"})
		if err != nil {
			return nil, err
		}
		if _, err := w.AddInterface(Interface{LinkType: 1}); err != nil {
			return nil, err
		}
		for i, n := range roundTripSizes {
			if i%3 == 2 {
				err = w.WritePacketCustom(0, int64(i), uint32(n+i), payload(n, byte(i)), 32473, []byte{1, 2, byte(i)})
			} else {
				err = w.WritePacket(0, int64(i)<<33, uint32(n+i%2), payload(n, byte(i)))
			}
			if err != nil {
				return w, err
			}
		}
		return w, nil
	}
	var plain, buffered bytes.Buffer
	wp, err := write(&plain)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(&buffered, 4096)
	wb, err := write(bw)
	if err != nil {
		t.Fatal(err)
	}
	if err := bw.Flush(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain.Bytes(), buffered.Bytes()) || wp.Written() != wb.Written() || wb.Written() != int64(buffered.Len()) {
		t.Fatalf("through a bufio.Writer: %d bytes (Written %d), plain %d (Written %d), equal %v",
			buffered.Len(), wb.Written(), plain.Len(), wp.Written(), bytes.Equal(plain.Bytes(), buffered.Bytes()))
	}
	var lent reserver // lends at most 8 KiB at a time: the larger packets go through Write
	wr, err := write(&lent)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(plain.Bytes(), lent.b) || wr.Written() != wp.Written() || lent.lent == 0 {
		t.Fatalf("through a Reserver: %d bytes (Written %d, %d lent), plain %d (Written %d), equal %v",
			len(lent.b), wr.Written(), lent.lent, plain.Len(), wp.Written(), bytes.Equal(plain.Bytes(), lent.b))
	}
	for _, limit := range []int{5000, 20000, 70000} {
		fw := &failWriter{limit: limit}
		w, err := write(bufio.NewWriterSize(fw, 4096))
		if !errors.Is(err, errWrite) {
			t.Fatalf("limit %d: error %v, want %v", limit, err, errWrite)
		}
		if w.Written() > int64(limit)+4096 || w.Written() < int64(limit) {
			t.Errorf("limit %d: Written() = %d, want what reached the buffer", limit, w.Written())
		}
		if err2 := w.WritePacket(0, 1, 1, []byte{1}); err2 != err {
			t.Errorf("limit %d: next WritePacket returned %v, want sticky %v", limit, err2, err)
		}
	}
}

// reserver is a Reserver lending up to 8 KiB of its buffer at a time.
type reserver struct {
	b    []byte
	lent int
}

func (r *reserver) Write(p []byte) (int, error) { r.b = append(r.b, p...); return len(p), nil }

func (r *reserver) Reserve(n int) []byte {
	if n > 8192 {
		return nil
	}
	r.lent++
	r.b = append(r.b, bytes.Repeat([]byte{0xee}, n)...) // what the caller does not fill shows
	return r.b[len(r.b)-n:]
}
