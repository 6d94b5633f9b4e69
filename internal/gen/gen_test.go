package gen

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TestWriteFileParses: every packet of a generated file, with
// pseudo-random or text payloads, parses back to its stream and
// sequence, and a changed byte is caught.
func TestWriteFileParses(t *testing.T) {
	for _, text := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "g.pcap")
		if err := WriteFile(path, FileConfig{Count: 200, Mix: MixIMIX, Stream: 7, Text: text}); err != nil {
			t.Fatal(err)
		}
		f, _ := os.Open(path)
		r, err := pcapfile.NewReader(f, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := uint64(0); ; i++ {
			p, err := r.ReadPacket()
			if err == io.EOF {
				if i != 200 {
					t.Fatalf("text %v: %d packets", text, i)
				}
				break
			}
			stream, seq, ok, err := Parse(p.Data, LinkTypeEthernet)
			if !ok || err != nil || stream != 7 || seq != i {
				t.Fatalf("text %v: packet %d: stream %d seq %d ok %v err %v", text, i, stream, seq, ok, err)
			}
			p.Data[len(p.Data)-1] ^= 1
			if _, _, ok, err := Parse(p.Data, LinkTypeEthernet); !ok || err == nil {
				t.Fatalf("text %v: packet %d: a changed byte passed", text, i)
			}
		}
		f.Close()
	}
}
