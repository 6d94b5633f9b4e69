// Package gen makes test traffic whose every packet can be recognised
// afterwards: synthetic pcap files and a UDP sender. Each payload starts
// with a marker, a stream id and a sequence number, and the rest of it is
// a pattern derived from both, so a checker can tell lost, duplicated and
// corrupted packets apart.
package gen

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// Marker starts every generated payload; TextMarker every text payload.
var (
	Marker     = [4]byte{'P', 'C', 'S', 'G'}
	TextMarker = [4]byte{'P', 'C', 'S', 'T'}
)

// textCorpus is what text payloads repeat: HTTP headers and JSON log
// lines, the kind of traffic that compresses well.
const textCorpus = "GET /api/v1/orders?customer=48213&status=open HTTP/1.1\r\nHost: shop.example.com\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36\r\n" +
	"Accept: application/json\r\nAccept-Encoding: gzip, deflate, br\r\nConnection: keep-alive\r\n\r\n" +
	"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nCache-Control: no-cache\r\n\r\n" +
	`{"ts":"2026-11-22T15:04:05.123Z","level":"info","service":"checkout","msg":"order placed","order_id":981234,"items":3,"total":"129.90","currency":"EUR","latency_ms":42}` + "\n" +
	`{"ts":"2026-11-22T15:04:05.181Z","level":"warn","service":"payments","msg":"retrying charge","attempt":2,"provider":"acme-pay","err":"timeout after 2000ms"}` + "\n"

// TextPayload fills p (at least PayloadHeader bytes) for stream and seq
// with text from a small corpus, starting at a place that depends on seq.
func TextPayload(p []byte, stream uint32, seq uint64) {
	copy(p, TextMarker[:])
	binary.BigEndian.PutUint32(p[4:], stream)
	binary.BigEndian.PutUint64(p[8:], seq)
	off := int(seq*7919) % len(textCorpus)
	for i := PayloadHeader; i < len(p); i++ {
		p[i] = textCorpus[off]
		if off++; off == len(textCorpus) {
			off = 0
		}
	}
}

// PayloadHeader is the marker, stream id (u32) and sequence (u64).
const PayloadHeader = 16

// Payload fills p (at least PayloadHeader bytes) for stream and seq.
func Payload(p []byte, stream uint32, seq uint64) {
	copy(p, Marker[:])
	binary.BigEndian.PutUint32(p[4:], stream)
	binary.BigEndian.PutUint64(p[8:], seq)
	x := uint32(seq)*2654435761 ^ stream
	for i := PayloadHeader; i < len(p); i++ {
		x = x*1664525 + 1013904223
		p[i] = byte(x >> 24)
	}
}

// Parse finds a generated payload in the UDP payload of an Ethernet or
// raw IPv4 frame and checks its pattern. ok is false for other packets;
// err, wrapping ErrCorrupt, reports a generated payload whose bytes are
// wrong.
func Parse(frame []byte, linkType uint16) (stream uint32, seq uint64, ok bool, err error) {
	ip := frame
	if linkType == LinkTypeEthernet {
		if len(frame) < 14 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
			return 0, 0, false, nil
		}
		ip = frame[14:]
	}
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != 17 {
		return 0, 0, false, nil
	}
	ihl := int(ip[0]&0x0f) * 4
	if len(ip) < ihl+8+PayloadHeader {
		return 0, 0, false, nil
	}
	p := ip[ihl+8:]
	fill := Payload
	switch [4]byte(p[:4]) {
	case Marker:
	case TextMarker:
		fill = TextPayload
	default:
		return 0, 0, false, nil
	}
	stream, seq = binary.BigEndian.Uint32(p[4:]), binary.BigEndian.Uint64(p[8:])
	want := make([]byte, len(p))
	fill(want, stream, seq)
	if string(want) != string(p) {
		return stream, seq, true, fmt.Errorf("stream %d seq %d, %d bytes: %w", stream, seq, len(p), ErrCorrupt)
	}
	return stream, seq, true, nil
}

// Link types of generated frames.
const (
	LinkTypeEthernet = 1
	LinkTypeRaw      = 101
)

// Mix names a packet size distribution (sizes are whole frames).
type Mix string

// Mixes.
const (
	Mix64    Mix = "64"    // every frame 64 bytes
	MixIMIX  Mix = "imix"  // 64/576/1500 bytes, 7:4:1
	MixMixed Mix = "mixed" // 64..1514 plus 9000-byte jumbo and 65535-byte frames
)

// Size returns the frame size of packet i of the mix; an unknown mix
// wraps ErrMix.
func (m Mix) Size(i uint64, rng *rand.Rand) (int, error) {
	switch m {
	case Mix64:
		return 64, nil
	case MixIMIX:
		switch r := i % 12; {
		case r < 7:
			return 64, nil
		case r < 11:
			return 576, nil
		default:
			return 1500, nil
		}
	case MixMixed:
		switch r := rng.IntN(100); {
		case r == 0:
			return 65535, nil
		case r < 4:
			return 9000, nil
		default:
			return 64 + rng.IntN(1514-64+1), nil
		}
	}
	return 0, fmt.Errorf("%w %q (want 64, imix or mixed)", ErrMix, m)
}

// FileConfig describes a synthetic capture file.
type FileConfig struct {
	Count      uint64
	Mix        Mix
	Stream     uint32 // stream id in every payload
	LinkType   uint16 // LinkTypeEthernet (default) or LinkTypeRaw
	Nanosecond bool   // ns timestamps (pcap magic a1b23c4d); else µs
	Start      int64  // first timestamp, Unix ns; 0 means 2026-01-01
	Seed       uint64
	Text       bool // text payloads (TextPayload) instead of pseudo-random bytes
}

// WriteFile writes a classic pcap file of UDP/IPv4 packets with
// generated payloads, packet timestamps 1.234567 µs apart (plus ns
// jitter in ns files).
func WriteFile(path string, c FileConfig) error {
	if c.LinkType == 0 {
		c.LinkType = LinkTypeEthernet
	}
	if c.LinkType != LinkTypeEthernet && c.LinkType != LinkTypeRaw {
		return fmt.Errorf("gen: link type %d not supported", c.LinkType)
	}
	if c.Start == 0 {
		c.Start = 1767225600_000000000
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	w, err := pcapfile.NewPcapWriter(bw, c.LinkType, 65535, c.Nanosecond)
	if err != nil {
		f.Close()
		return err
	}
	rng := rand.New(rand.NewPCG(c.Seed, uint64(c.Stream)))
	buf := make([]byte, 65535)
	ts := c.Start
	for i := range c.Count {
		size, err := c.Mix.Size(i, rng)
		if err != nil {
			f.Close()
			return err
		}
		frame := Frame(buf[:size], c.LinkType, c.Stream, i)
		if c.Text {
			off := 20 + 8
			if c.LinkType == LinkTypeEthernet {
				off += 14
			}
			TextPayload(frame[off:], c.Stream, i)
		}
		ts += 1234567 + int64(rng.IntN(1000))
		if err := w.WritePacket(ts, uint32(len(frame)), frame); err != nil {
			f.Close()
			return err
		}
	}
	return errors.Join(bw.Flush(), f.Close())
}

// MinFrame is the smallest frame Frame can build (Ethernet).
const MinFrame = 14 + 20 + 8 + PayloadHeader

// Frame builds a UDP/IPv4 frame of exactly len(buf) bytes (at least
// MinFrame) in buf, addressed 198.18.0.1:40000
// -> 198.18.0.2:5555, with the generated payload for stream and seq.
func Frame(buf []byte, linkType uint16, stream uint32, seq uint64) []byte {
	ip := buf
	if linkType == LinkTypeEthernet {
		copy(buf, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00})
		ip = buf[14:]
	}
	ipLen := min(len(ip), 65535)
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	binary.BigEndian.PutUint32(ip[4:], uint32(seq)&0xffff<<16)
	ip[8], ip[9] = 64, 17
	ip[10], ip[11] = 0, 0
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 18, 0, 2})
	binary.BigEndian.PutUint16(ip[10:], ipChecksum(ip[:20]))
	udp := ip[20:]
	binary.BigEndian.PutUint16(udp[0:], 40000)
	binary.BigEndian.PutUint16(udp[2:], 5555)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	binary.BigEndian.PutUint16(udp[6:], 0) // no checksum (legal in IPv4)
	Payload(udp[8:], stream, seq)
	return buf
}

func ipChecksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
