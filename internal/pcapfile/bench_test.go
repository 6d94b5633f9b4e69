package pcapfile

import (
	"fmt"
	"io"
	"testing"
)

var benchSizes = []int{64, 576, 1500, 9000, 65535}

// benchFormats build a file head (file header or SHB+IDB) and one packet
// record/block, for a repeatReader that yields the head and then the packet
// forever.
var benchFormats = []struct {
	name  string
	build func(size int) (head, body []byte)
}{
	{"pcap", func(size int) ([]byte, []byte) {
		head := newPcap(le, magicNano, 2, 65535, 1).b
		body := (&pcapBuilder{order: le}).rec(1_700_000_000, 123, uint32(size), uint32(size), payload(size, 0)).b
		return head, body
	}},
	{"pcapng", func(size int) ([]byte, []byte) {
		head := new(ngBuilder).section(le).idb(1, 65535, opt{optIfName, []byte("eth0")}, opt{optIfTsresol, []byte{9}}).b
		body := (&ngBuilder{order: le}).epb(0, 1_700_000_000_000_000_123, uint32(size), payload(size, 0)).b
		return head, body
	}},
}

func BenchmarkReadInto(b *testing.B) {
	for _, f := range benchFormats {
		for _, size := range benchSizes {
			b.Run(fmt.Sprintf("%s/%d", f.name, size), func(b *testing.B) {
				head, body := f.build(size)
				r, err := NewReader(&repeatReader{head: head, body: body}, nil)
				if err != nil {
					b.Fatal(err)
				}
				var p Packet
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := r.ReadInto(&p); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkNgWriterWritePacket(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			w, err := NewNgWriter(io.Discard, SectionInfo{})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := w.AddInterface(Interface{Name: "eth0", LinkType: 1, SnapLen: 65535}); err != nil {
				b.Fatal(err)
			}
			data := payload(size, 0)
			ts := int64(1_700_000_000_000_000_000)
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				ts++
				if err := w.WritePacket(0, ts, uint32(size), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
