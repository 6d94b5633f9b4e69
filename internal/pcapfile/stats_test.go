package pcapfile

import (
	"bytes"
	"io"
	"testing"
)

// TestStatsAndSizes: the statistics blocks NgWriter writes come back
// through ReaderConfig.OnStats with their interface, time and counters,
// and EPBSize and InterfaceSize are what the writer writes.
func TestStatsAndSizes(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewNgWriter(&buf, SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range []Interface{{Name: "a:eth0", Description: "d", LinkType: 1, SnapLen: 9}, {LinkType: 101}, {Name: "abcd", LinkType: 1}} {
		n := w.Written()
		if _, err := w.AddInterface(ifc); err != nil {
			t.Fatal(err)
		}
		if got := w.Written() - n; got != InterfaceSize(ifc) {
			t.Errorf("%+v: wrote %d, InterfaceSize %d", ifc, got, InterfaceSize(ifc))
		}
	}
	for _, l := range []int{0, 1, 3, 4, 5, 1500} {
		n := w.Written()
		if err := w.WritePacket(1, 5, 0, make([]byte, l)); err != nil {
			t.Fatal(err)
		}
		if got := w.Written() - n; got != EPBSize(l) {
			t.Errorf("%d bytes: wrote %d, EPBSize %d", l, got, EPBSize(l))
		}
	}
	want := []InterfaceStats{
		{Timestamp: 1_780_000_000_123_456_789, IfRecv: 10, HaveIfRecv: true, OsDrop: 2, HaveOsDrop: true, Comment: "x"},
		{Timestamp: 7, IfDrop: 1, HaveIfDrop: true, UsrDeliv: 8, HaveUsrDeliv: true},
		{Timestamp: 9},
	}
	for i, st := range want {
		if err := w.WriteStats(i, st); err != nil {
			t.Fatal(err)
		}
	}
	var got []InterfaceStats
	var ifs []int
	r, err := NewReader(&buf, &ReaderConfig{OnStats: func(i int, st InterfaceStats) { ifs, got = append(ifs, i), append(got, st) }})
	if err != nil {
		t.Fatal(err)
	}
	var p Packet
	for r.ReadInto(&p) == nil {
	}
	if err := r.ReadInto(&p); err != io.EOF {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d statistics blocks, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] || ifs[i] != i {
			t.Errorf("block %d: interface %d, %+v; want %+v", i, ifs[i], got[i], want[i])
		}
	}
}
