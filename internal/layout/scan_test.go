package layout

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
)

// markedStream writes a pcapng stream: batch 1 (two packets, the last
// marked), batch 2 of instance id2 (one marked packet), then a packet
// without a mark (a batch torn by a crash). It returns the stream and
// the length up to the end of batch 2.
func markedStream(t *testing.T, id1, id2 [16]byte) (b []byte, complete int64) {
	t.Helper()
	var buf bytes.Buffer
	w, err := pcapfile.NewNgWriter(&buf, pcapfile.SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	ifc, err := w.AddInterface(pcapfile.Interface{Name: "eth0", LinkType: 1})
	if err != nil {
		t.Fatal(err)
	}
	pkt := make([]byte, 60)
	steps := []func() error{
		func() error { return w.WritePacket(ifc, 100, 60, pkt) },
		func() error { return w.WritePacketCustom(ifc, 200, 60, pkt, MarkPEN, AppendMark(nil, id1, 7)) },
		func() error { return w.WritePacketCustom(ifc, 300, 60, pkt, MarkPEN, AppendMark(nil, id2, 3)) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			t.Fatal(err)
		}
	}
	complete = int64(buf.Len())
	if err := w.WritePacket(ifc, 400, 60, pkt); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), complete
}

// TestScan: the cut is after the last marked packet, with the highest
// mark of each instance before it and the times of every whole packet;
// a stream cut anywhere scans to a cut no later than the cut itself; and
// CompleteLength reads a file so named to the same length.
func TestScan(t *testing.T) {
	id1, id2 := [16]byte{1}, [16]byte{2}
	b, complete := markedStream(t, id1, id2)
	sc, err := Scan(context.Background(), bytes.NewReader(b), compress.None)
	if err != nil {
		t.Fatal(err)
	}
	if sc.Cut != complete || sc.Raw != complete || sc.Marks[id1] != 7 || sc.Marks[id2] != 3 || len(sc.Marks) != 2 {
		t.Fatalf("cut %d raw %d marks %v; want %d and marks 7, 3", sc.Cut, sc.Raw, sc.Marks, complete)
	}
	if want := (TimeRange{Min: 100, Max: 400, OK: true}); sc.Times != want {
		t.Errorf("times %+v, want %+v", sc.Times, want)
	}
	for n := range len(b) {
		sc, err := Scan(context.Background(), bytes.NewReader(b[:n]), compress.None)
		if err != nil || sc.Cut > int64(n) || n >= int(complete) && sc.Cut != complete {
			t.Fatalf("first %d bytes: cut %d, %v", n, sc.Cut, err)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "a1_20261124T100000.000Z.pcapng"+PartSuffix)
	if err := os.WriteFile(path, b, 0o640); err != nil {
		t.Fatal(err)
	}
	if n, err := CompleteLength(context.Background(), path); err != nil || n != complete {
		t.Errorf("CompleteLength = %d, %v; want %d", n, err, complete)
	}
}

// TestMarkRoundTrip: MarkIn finds what AppendMark wrote among other
// options, and nothing in options without it.
func TestMarkRoundTrip(t *testing.T) {
	id := [16]byte{9, 8, 7}
	mark := AppendMark(nil, id, 1<<40)
	if len(mark) != MarkSize {
		t.Fatalf("mark of %d bytes, want %d", len(mark), MarkSize)
	}
	opt := func(code uint16, v []byte) []byte {
		b := []byte{byte(code), byte(code >> 8), byte(len(v)), byte(len(v) >> 8)}
		b = append(b, v...)
		return append(b, make([]byte, -len(v)&3)...)
	}
	pen := binary.LittleEndian.AppendUint32(nil, MarkPEN)
	withMark := append(opt(1, []byte("comment")), opt(pcapfile.OptCustomBinaryNoCopy, append(pen, mark...))...)
	for _, tc := range []struct {
		name string
		opts []byte
		ok   bool
	}{
		{"mark after a comment", withMark, true},
		{"no options", nil, false},
		{"comment only", opt(1, []byte("comment")), false},
		{"another PEN", opt(pcapfile.OptCustomBinaryNoCopy, append([]byte{1, 0, 0, 0}, mark...)), false},
		{"cut short", withMark[:len(withMark)-4], false},
	} {
		gid, seq, ok := MarkIn(tc.opts)
		if ok != tc.ok || ok && (gid != id || seq != 1<<40) {
			t.Errorf("%s: %x %d %v", tc.name, gid, seq, ok)
		}
	}
}

// TestScanTimeResolution: Scan gives a file's times in nanoseconds as
// pcapfile reads its packets, whatever its interface's if_tsresol and
// if_tsoffset (retention takes a closed file's times from it, and a
// query skips a file by them): a capture of microseconds copied under
// the root read as 1970, and retention's age rule or a query of a time
// range would pass it over. Interfaces of a second section are its own.
func TestScanTimeResolution(t *testing.T) {
	le := binary.LittleEndian
	opt, end := capturetest.NgOption, capturetest.NgEnd
	for _, c := range []struct {
		name string
		opts []byte
		t0   uint64
	}{
		{"microseconds by default", nil, 1_700_000_000_000_000},
		{"milliseconds", append(opt(9, 3), end...), 1_700_000_000_000},
		{"nanoseconds", append(opt(9, 9), end...), 1_700_000_000_000_000_000},
		{"2^-20 s, an offset", append(append(opt(9, 0x80|20), opt(14, le.AppendUint64(nil, 1000)...)...), end...), 1_699_999_000 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := capturetest.AppendNgHead(nil, 1, c.opts)
			for i := range uint64(10) {
				b = capturetest.AppendEPB(b, c.t0+i*1000, make([]byte, 60), nil)
			}
			// A second section of nanoseconds, as the store writes.
			b = capturetest.AppendNgHead(b, 1, append(opt(9, 9), end...))
			b = capturetest.AppendEPB(b, 1_700_000_100_000_000_000, make([]byte, 60), nil)
			path := filepath.Join(t.TempDir(), "r.pcapng")
			if err := os.WriteFile(path, b, 0o640); err != nil {
				t.Fatal(err)
			}
			var want TimeRange
			capturetest.EachPacket(t, path, func(_ *pcapfile.Reader, p *pcapfile.Packet) { want.Add(p.Timestamp) })
			sc, err := Scan(context.Background(), bytes.NewReader(b), compress.None)
			if err != nil {
				t.Fatal(err)
			}
			if sc.Times != want || want.Min < 1_699_000_000_000_000_000 {
				t.Errorf("scan: times %+v, pcapfile reads %+v", sc.Times, want)
			}
		})
	}
}
