package pcapfile

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// TestSectionComments: the Reader keeps the section header's comment.
func TestSectionComments(t *testing.T) {
	for _, c := range []string{"", "one", "two\nlines, odd length"} {
		var b bytes.Buffer
		if _, err := NewNgWriter(&b, SectionInfo{Comment: c, OS: "Linux"}); err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(&b, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{c}
		if c == "" {
			want = nil
		}
		if got := r.SectionComments(); !slices.Equal(got, want) {
			t.Errorf("%q: %q", c, got)
		}
	}
}

// TestMaxInterfaces: one interface beyond the limit, or whose name
// takes the names beyond theirs, is ErrTooLarge.
func TestMaxInterfaces(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewNgWriter(&b, SectionInfo{})
	for range 3 {
		if _, err := w.AddInterface(Interface{Name: "a:e", LinkType: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		max, bytes int
		want       error
	}{{0, 0, io.EOF}, {3, 9, io.EOF}, {2, 0, ErrTooLarge}, {0, 8, ErrTooLarge}} {
		r, err := NewReader(bytes.NewReader(b.Bytes()), &ReaderConfig{MaxInterfaces: tc.max, MaxInterfaceBytes: tc.bytes})
		if err != nil {
			t.Fatal(err)
		}
		var p Packet
		if err := r.ReadInto(&p); !errors.Is(err, tc.want) {
			t.Errorf("max %d: %v, want %v", tc.max, err, tc.want)
		}
	}
}

// TestStatsSize: StatsSize is what WriteStats writes.
func TestStatsSize(t *testing.T) {
	for _, st := range []InterfaceStats{{}, {Comment: "abc"}, {HaveIfRecv: true, HaveOsDrop: true}, {Comment: "abcd", HaveUsrDeliv: true}} {
		var b bytes.Buffer
		w, _ := NewNgWriter(&b, SectionInfo{})
		w.AddInterface(Interface{LinkType: 1})
		before := w.Written()
		if err := w.WriteStats(0, st); err != nil {
			t.Fatal(err)
		}
		if got := w.Written() - before; got != StatsSize(st) {
			t.Errorf("%+v: wrote %d, StatsSize %d", st, got, StatsSize(st))
		}
	}
}

// TestWritePacketComment: a packet with a comment reads back whole,
// the comment in its block.
func TestWritePacketComment(t *testing.T) {
	var b bytes.Buffer
	w, _ := NewNgWriter(&b, SectionInfo{})
	w.AddInterface(Interface{LinkType: 1})
	for _, c := range []string{"", "cut", "four"} {
		if err := w.WritePacketComment(0, 7, 9, []byte("abcde"), c); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Contains(b.Bytes(), []byte("cut\x00")) || !bytes.Contains(b.Bytes(), []byte("four")) {
		t.Error("comments not written")
	}
	r, err := NewReader(&b, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var p Packet
		if err := r.ReadInto(&p); err != nil || string(p.Data) != "abcde" || p.Timestamp != 7 || p.OrigLen != 9 {
			t.Fatalf("packet %d: %v %+v", i, err, p)
		}
	}
}
