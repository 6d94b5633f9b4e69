package tap

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestPacketCounter: fed a pcapng stream in pieces of every size, the
// counter writes exactly the stream up to the end of the limit's
// packet, however the pieces cut its blocks, then errCounted.
func TestPacketCounter(t *testing.T) {
	var src bytes.Buffer
	w, err := pcapfile.NewNgWriter(&src, pcapfile.SectionInfo{Comment: "count"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(pcapfile.Interface{Name: "web1:eth0", LinkType: 1}); err != nil {
		t.Fatal(err)
	}
	var ends []int // the stream's length after each packet
	for i := range 6 {
		if i == 3 {
			w.AddInterface(pcapfile.Interface{Name: "web1:eth1", LinkType: 1}) // a block mid-stream
		}
		if err := w.WritePacket(0, int64(i), uint32(60+i), make([]byte, 60+i)); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, src.Len())
	}
	stream := src.Bytes()
	for limit := 1; limit <= 5; limit++ {
		for piece := 1; piece <= 97; piece += 3 {
			var out bytes.Buffer
			c := &packetCounter{w: &out, limit: int64(limit)}
			var err error
			for off := 0; off < len(stream) && err == nil; off += piece {
				_, err = c.Write(stream[off:min(off+piece, len(stream))])
			}
			if !errors.Is(err, errCounted) || !bytes.Equal(out.Bytes(), stream[:ends[limit-1]]) {
				t.Fatalf("limit %d, pieces of %d: %v, %d bytes written, want errCounted after %d", limit, piece, err, out.Len(), ends[limit-1])
			}
		}
	}
	var out bytes.Buffer
	c := &packetCounter{w: &out, limit: 1}
	if _, err := c.Write([]byte("PCAPSYNC-TAP/1 ERROR no\n")); err == nil || errors.Is(err, errCounted) {
		t.Errorf("not pcapng: %v, want an error", err)
	}
}

// FuzzPacketCounter: whatever a tap sends, in pieces of any size, the
// counter writes a prefix of it and stops with errCounted only at the
// end of a block, never panics.
func FuzzPacketCounter(f *testing.F) {
	var src bytes.Buffer
	w, _ := pcapfile.NewNgWriter(&src, pcapfile.SectionInfo{})
	w.AddInterface(pcapfile.Interface{Name: "a:b", LinkType: 1})
	for i := range 3 {
		w.WritePacket(0, int64(i), 60, make([]byte, 60))
	}
	f.Add(src.Bytes(), uint8(7), uint8(2))
	f.Add([]byte("PCAPSYNC-TAP/1 ERROR no\n"), uint8(3), uint8(1))
	f.Fuzz(func(t *testing.T, stream []byte, piece, limit uint8) {
		var out bytes.Buffer
		c := &packetCounter{w: &out, limit: int64(limit) + 1}
		var err error
		for off := 0; off < len(stream) && err == nil; off += int(piece) + 1 {
			_, err = c.Write(stream[off:min(off+int(piece)+1, len(stream))])
		}
		if !bytes.HasPrefix(stream, out.Bytes()) {
			t.Fatalf("wrote %d bytes that are not the stream's", out.Len())
		}
		if errors.Is(err, errCounted) && c.hn != 0 {
			t.Fatalf("stopped inside a block")
		}
	})
}
