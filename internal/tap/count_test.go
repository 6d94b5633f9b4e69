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
