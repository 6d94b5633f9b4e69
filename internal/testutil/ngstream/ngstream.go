// Package ngstream generates pcapng streams for the tests of the
// encoders that parse them (pcapzstd, pcapflate): either byte order,
// packets of a few flows with random, text or zero payloads, other
// blocks between them, lengths that lie, or bytes that are not pcapng.
package ngstream

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// Stream is a generated input: a pcapng section (either byte order) of
// packets from a few flows, with the kinds of payload and damage a
// case asks for.
type Stream struct {
	Big     bool    // the section is big-endian
	Flows   int     // distinct flows
	Text    bool    // payloads of text (else random)
	Zero    bool    // payloads of zeros
	Odd     float64 // share of other blocks (statistics, custom) between packets
	Garbage bool    // a length that lies, then random bytes
	Raw     bool    // not pcapng at all: random bytes
}

// Gen returns a section of about n blocks.
func (s Stream) Gen(r *rand.Rand, n int) []byte {
	if s.Raw {
		b := make([]byte, n*200)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	var ord binary.AppendByteOrder = binary.LittleEndian
	if s.Big {
		ord = binary.BigEndian
	}
	block := func(dst []byte, typ uint32, body []byte) []byte {
		pad := (4 - len(body)%4) % 4
		total := uint32(12 + len(body) + pad)
		dst = ord.AppendUint32(dst, typ)
		dst = ord.AppendUint32(dst, total)
		dst = append(dst, body...)
		dst = append(dst, make([]byte, pad)...)
		return ord.AppendUint32(dst, total)
	}
	var out, body []byte
	body = ord.AppendUint32(body[:0], 0x1a2b3c4d)
	body = ord.AppendUint16(body, 1)
	body = ord.AppendUint16(body, 0)
	body = ord.AppendUint64(body, ^uint64(0))
	out = block(out, 0x0a0d0d0a, body)
	body = ord.AppendUint16(body[:0], 1) // Ethernet
	body = append(body, 0, 0)
	body = ord.AppendUint32(body, 262144)
	out = block(out, 1, body)
	type flow struct{ mac, ip, ports []byte }
	flows := make([]flow, max(s.Flows, 1))
	for i := range flows {
		flows[i] = flow{mac: Bytes(r, 12), ip: Bytes(r, 8), ports: Bytes(r, 4)}
	}
	words := []string{"GET ", "/index.html ", "HTTP/1.1\r\n", "Host: example.com\r\n", "{\"user\": ", "\"value\", ", "Content-Length: 42\r\n"}
	ts := uint64(1_700_000_000_000_000)
	for i := range n {
		if r.Float64() < s.Odd {
			out = block(out, uint32(3+r.IntN(2)*0x0bad), Bytes(r, r.IntN(40)))
			continue
		}
		f := flows[r.IntN(len(flows))]
		size := []int{64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1500}[r.IntN(12)]
		if r.IntN(5) == 0 {
			size = 14 + r.IntN(1500) // any length, truncated packets too
		}
		pkt := make([]byte, 0, size)
		pkt = append(pkt, f.mac...)
		pkt = append(pkt, 8, 0, 0x45, 0)
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(size-14))
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(i))
		pkt = append(pkt, 0x40, 0, 64, 17, byte(r.Uint32()), byte(r.Uint32()))
		pkt = append(pkt, f.ip...)
		pkt = append(pkt, f.ports...)
		pkt = binary.BigEndian.AppendUint16(pkt, uint16(size-34))
		pkt = append(pkt, byte(r.Uint32()), byte(r.Uint32()))
		for len(pkt) < size {
			switch {
			case s.Zero:
				pkt = append(pkt, 0)
			case s.Text:
				pkt = append(pkt, words[r.IntN(len(words))]...)
			default:
				pkt = append(pkt, byte(r.Uint32()))
			}
		}
		pkt = pkt[:size]
		ts += uint64(r.IntN(2000))
		body = ord.AppendUint32(body[:0], 0)
		body = ord.AppendUint32(body, uint32(ts>>32))
		body = ord.AppendUint32(body, uint32(ts))
		body = ord.AppendUint32(body, uint32(len(pkt)))
		body = ord.AppendUint32(body, uint32(len(pkt)+r.IntN(2)))
		body = append(body, pkt...)
		out = block(out, 6, body)
		if s.Garbage && i == n/2 {
			out = ord.AppendUint32(out, 6)
			out = ord.AppendUint32(out, 7) // not a multiple of 4
			out = append(out, Bytes(r, 3000)...)
		}
	}
	return out
}

// Bytes returns n random bytes.
func Bytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Cases are the streams every encoder's tests write: the flows' count,
// both byte orders, text and zero payloads, other blocks between the
// packets, a length that lies, and bytes that are not pcapng.
var Cases = map[string]Stream{
	"one flow":           {Flows: 1},
	"many flows":         {Flows: 300},
	"big-endian":         {Big: true, Flows: 5},
	"text":               {Flows: 3, Text: true},
	"zero payloads":      {Flows: 2, Zero: true},
	"other blocks":       {Flows: 4, Odd: 0.2},
	"a lying length":     {Flows: 4, Garbage: true},
	"not pcapng":         {Raw: true},
	"big-endian, others": {Big: true, Flows: 50, Odd: 0.1},
}

// AddSeeds adds the fuzzing seeds of an encoder's test that takes a
// stream and a uint64 saying where to cut it: short streams of the
// structure an encoder follows (both byte orders, lengths that lie, zero
// payloads), and a packet block whose length claims 1 GiB.
func AddSeeds(f *testing.F) {
	for i, s := range []Stream{{Flows: 2}, {Big: true, Flows: 1}, {Flows: 3, Garbage: true}, {Flows: 1, Zero: true}} {
		r := rand.New(rand.NewPCG(uint64(i), 11))
		f.Add(s.Gen(r, 20), uint64(0x0102030405060708))
	}
	lie := binary.LittleEndian.AppendUint32(nil, 6)
	lie = binary.LittleEndian.AppendUint32(lie, 1<<30)
	f.Add(append(lie, make([]byte, 100)...), uint64(3))
}

// EachCase runs check, as a subtest per case, on four streams of each
// of Cases (3 000 to 23 000 blocks), with the generator that made them
// and how many pieces (frames, members) to write them in: 1 to 3.
func EachCase(t *testing.T, check func(t *testing.T, r *rand.Rand, in []byte, pieces int)) {
	for name, s := range Cases {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(4) {
				r := rand.New(rand.NewPCG(seed, 7))
				in := s.Gen(r, 3000+r.IntN(20000))
				check(t, r, in, 1+int(seed%3))
			}
		})
	}
}
