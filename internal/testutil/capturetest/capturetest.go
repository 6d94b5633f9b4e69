// Package capturetest holds what the tests of the collector and the
// store share: the batches a test agent sends and a reader of the
// capture files written for it.
package capturetest

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// PartSuffix ends the name of a capture file still being written; it is
// store.PartSuffix (the store's tests check that they agree), written
// out here so that the store's own tests can import this package.
const PartSuffix = ".part"

// Hello is agent name's hello, with instance ID {id} and two interfaces:
// eth0 (Ethernet, snaplen 262144) and tun0 (raw IP, snaplen 1500).
func Hello(name string, id byte) *wire.Hello {
	return &wire.Hello{Instance: [16]byte{id}, Name: name, Host: "h1",
		Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 262144}, {Name: "tun0", LinkType: 101, SnapLen: 1500}}}
}

// BatchPayload builds the payload of batch seq (uncompressed, no frame
// header) holding n packets. Packet k = first+i has timestamp
// 1.7e18+k*1000 ns, interface k%2, original length 100+k%7, and 60+k%40
// bytes of data, every byte k.
func BatchPayload(seq uint64, first, n int) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		k := first + i
		e.Append(int64(1_700_000_000_000_000_000+k*1000), uint32(k%2), uint32(100+k%7), bytes.Repeat([]byte{byte(k)}, 60+k%40))
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

// ZeroPacket is a 1500-byte frame of zeros but for its number i in the
// first three bytes: the most compressible traffic. It is built in buf,
// which must hold 1500 bytes.
func ZeroPacket(buf []byte, i uint64) []byte {
	p := buf[:1500]
	clear(p)
	p[0], p[1], p[2] = byte(i), byte(i>>8), byte(i>>16)
	return p
}

// Packet is a packet read back from a capture file.
type Packet struct {
	TS      int64  // timestamp, ns since the epoch
	Iface   string // the interface's name
	OrigLen uint32
	Data    []byte // a copy, the test's to keep
}

// IsIndex reports whether name is the index or the timeline summary
// beside a capture file (index.IsIndex; the store's tests check that they agree), not a
// capture file.
func IsIndex(name string) bool {
	return strings.HasSuffix(strings.TrimSuffix(name, PartSuffix), ".idx") ||
		strings.HasSuffix(name, ".timeline") || strings.Contains(name, ".timeline.tmp")
}

// ReadDir reads every capture file of an agent's directory dir, in name
// order (plain, gzip or zstd), skipping their indexes, and fails t on a
// leftover .part file.
func ReadDir(t testing.TB, dir string) (pkts []Packet, files int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if IsIndex(e.Name()) {
			continue
		}
		if strings.HasSuffix(e.Name(), PartSuffix) {
			t.Fatalf("%s still open", e.Name())
		}
		pkts = append(pkts, ReadFile(t, filepath.Join(dir, e.Name()))...)
		files++
	}
	return pkts, files
}

// ReadFile reads every packet of one capture file (plain, gzip or zstd).
func ReadFile(t testing.TB, path string) []Packet {
	t.Helper()
	var pkts []Packet
	EachPacket(t, path, func(r *pcapfile.Reader, p *pcapfile.Packet) {
		pkts = append(pkts, Packet{p.Timestamp, r.Interfaces()[p.Interface].Name, p.OrigLen, bytes.Clone(p.Data)})
	})
	return pkts
}

// EachPacket calls fn with every packet of the capture file at path
// (pcap or pcapng; plain, gzip or zstd, as pcapfile.Open reads it), in
// file order, and its reader (the interfaces described so far, the
// offset after the packet); p's data is valid until fn returns. It
// returns every interface of the file; a file it cannot read to its
// end fails t.
func EachPacket(t testing.TB, path string, fn func(r *pcapfile.Reader, p *pcapfile.Packet)) []pcapfile.Interface {
	t.Helper()
	f, err := pcapfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapfile.NewReader(f, nil)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var p pcapfile.Packet
	for n := 0; ; n++ {
		if err := r.ReadInto(&p); err == io.EOF {
			return r.Interfaces()
		} else if err != nil {
			t.Fatalf("%s: packet %d: %v", filepath.Base(path), n, err)
		}
		fn(r, &p)
	}
}

// AppendNgHead appends a little-endian pcapng section header and the
// description of one interface of link type linkType, with options opts
// (nil: none, so microseconds; else ending with opt_endofopt): the head
// of a capture file written by hand.
func AppendNgHead(b []byte, linkType uint16, opts []byte) []byte {
	le := binary.LittleEndian
	b = le.AppendUint32(b, 0x0A0D0D0A)
	b = le.AppendUint32(b, 28)
	b = le.AppendUint32(b, 0x1A2B3C4D)
	b = le.AppendUint32(b, 1) // version 1.0
	b = le.AppendUint64(b, ^uint64(0))
	b = le.AppendUint32(b, 28)
	b = le.AppendUint32(b, 1) // interface description
	b = le.AppendUint32(b, uint32(20+len(opts)))
	b = le.AppendUint16(b, linkType)
	b = le.AppendUint16(b, 0)
	b = le.AppendUint32(b, 0)
	b = append(b, opts...)
	return le.AppendUint32(b, uint32(20+len(opts)))
}

// AppendEPB appends a little-endian enhanced packet block of interface
// 0 at timestamp ts (in the interface's units), data captured whole,
// with options opts (nil: none; else ending with opt_endofopt).
func AppendEPB(b []byte, ts uint64, data, opts []byte) []byte {
	le := binary.LittleEndian
	pad := -len(data) & 3
	total := uint32(32 + len(data) + pad + len(opts))
	b = le.AppendUint32(b, 6)
	b = le.AppendUint32(b, total)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, uint32(ts>>32))
	b = le.AppendUint32(b, uint32(ts))
	b = le.AppendUint32(b, uint32(len(data)))
	b = le.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	b = append(b, make([]byte, pad)...)
	b = append(b, opts...)
	return le.AppendUint32(b, total)
}

// NgOption is a little-endian pcapng option of code, its value v padded
// to 4 bytes; NgEnd ends a list of them.
func NgOption(code uint16, v ...byte) []byte {
	b := binary.LittleEndian.AppendUint16(nil, code)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(v)))
	b = append(b, v...)
	return append(b, make([]byte, -len(v)&3)...)
}

// NgEnd is opt_endofopt.
var NgEnd = []byte{0, 0, 0, 0}
