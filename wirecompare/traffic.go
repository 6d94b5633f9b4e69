package wirecompare

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Record is one captured packet, the same for every codec. Captured
// length is len(Data).
type Record struct {
	Timestamp int64  // Unix nanoseconds
	IfIndex   uint32 // interface, as declared by the agent
	OrigLen   uint32 // length on the wire, >= len(Data)
	Data      []byte // captured bytes
}

// Batch is records of one source (an agent).
type Batch struct {
	Source  uint32
	Records []Record
}

// DataBytes is the sum of the records' captured lengths.
func (b *Batch) DataBytes() int {
	n := 0
	for _, r := range b.Records {
		n += len(r.Data)
	}
	return n
}

// Traffic names a kind of generated traffic.
type Traffic string

// Kinds of traffic. All but Random are Ethernet/IPv4 frames of a few
// dozen TCP and UDP flows with plausible headers (sequence numbers and
// IP ids advance per flow, checksums are right), sizes IMIX-like.
const (
	// Mixed is what a busy host sees: mostly ACKs and full-size TLS
	// segments (random bytes), some HTTP (text) and DNS.
	Mixed Traffic = "full"
	// Headers is Mixed captured at snaplen 128: headers and the first
	// bytes of payload; OrigLen keeps the length on the wire.
	Headers Traffic = "headers"
	// Text is Mixed with plain-text HTTP/JSON instead of TLS payloads.
	Text Traffic = "text"
	// Random is records of Mixed's sizes holding random bytes: the
	// incompressible bound.
	Random Traffic = "random"
)

// Traffics lists the kinds, in report order.
var Traffics = []Traffic{Headers, Mixed, Text, Random}

// Start is the first timestamp of generated traffic: 2026-01-01 UTC.
const Start = 1767225600_000000000

// Source is the source id of every generated batch.
const Source = 42

// Generate returns n records of traffic kind t, the same for the same
// seed. Timestamps advance by 0.1-20 µs (exponential, mean 4 µs), 95% of
// the packets are on interface 0, the rest on 1.
func Generate(t Traffic, n int, seed uint64) (Batch, error) {
	switch t {
	case Mixed, Headers, Text, Random:
	default:
		return Batch{}, fmt.Errorf("wirecompare: unknown traffic %q", t)
	}
	g := newGenerator(seed, t == Text)
	b := Batch{Source: Source, Records: make([]Record, n)}
	for i := range b.Records {
		r := &b.Records[i]
		r.Timestamp, r.IfIndex = g.next()
		r.Data = g.packet()
		r.OrigLen = uint32(len(r.Data))
		switch t {
		case Headers:
			if len(r.Data) > 128 {
				r.Data = r.Data[:128:128]
			}
		case Random:
			fillRandom(g.rng, r.Data)
		}
	}
	return b, nil
}

// Fixed returns one record of exactly size bytes (at least 54): a TCP
// segment of a TLS flow, as the single-record benchmarks use. Sizes over
// 1514 are what a host with segmentation offload captures.
func Fixed(size int) Batch {
	g := newGenerator(uint64(size), false)
	ts, _ := g.next()
	data := make([]byte, size)
	f := &g.flows[0]
	g.frame(data, f, size-ethIPTCP, payloadTLS)
	return Batch{Source: Source, Records: []Record{{Timestamp: ts, OrigLen: uint32(size), Data: data}}}
}

const (
	ethLen   = 14
	ipLen    = 20
	tcpLen   = 20
	udpLen   = 8
	ethIPTCP = ethLen + ipLen + tcpLen
	ethIPUDP = ethLen + ipLen + udpLen
	mss      = 1460
)

type payloadKind int

const (
	payloadTLS payloadKind = iota
	payloadHTTP
	payloadDNS
)

type flow struct {
	src, dst     [4]byte
	sport, dport uint16
	seq, ack     uint32
	ipid         uint16
	udp          bool
	kind         payloadKind
}

type generator struct {
	rng   *rand.Rand
	flows []flow
	ts    int64
}

func newGenerator(seed uint64, text bool) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, 0x70636170)), ts: Start}
	for i := range 32 {
		f := flow{
			src:   [4]byte{10, 0, byte(i / 8), byte(10 + i)},
			dst:   [4]byte{172, 16, byte(g.rng.IntN(4)), byte(1 + g.rng.IntN(200))},
			sport: uint16(32768 + g.rng.IntN(28000)),
			dport: 443,
			seq:   g.rng.Uint32(),
			ack:   g.rng.Uint32(),
			ipid:  uint16(g.rng.Uint32()),
		}
		switch {
		case i%8 == 7:
			f.udp, f.kind, f.dport = true, payloadDNS, 53
		case text || i%4 == 1:
			f.kind, f.dport = payloadHTTP, 80
		}
		g.flows = append(g.flows, f)
	}
	return g
}

// next advances the clock and picks an interface.
func (g *generator) next() (int64, uint32) {
	g.ts += 100 + int64(min(g.rng.ExpFloat64()*3900, 19900))
	var ifx uint32
	if g.rng.IntN(20) == 0 {
		ifx = 1
	}
	return g.ts, ifx
}

// packet returns a new frame of a random flow, sized IMIX-like: ACKs,
// full segments and some in between.
func (g *generator) packet() []byte {
	// Low flow numbers are busier (a few elephants, many mice).
	f := &g.flows[min(int(g.rng.ExpFloat64()*6), len(g.flows)-1)]
	var payload int
	switch {
	case f.udp:
		payload = 30 + g.rng.IntN(90)
	default:
		switch r := g.rng.IntN(100); {
		case r < 50:
			payload = 0 // a bare ACK
		case r < 85:
			payload = mss
		default:
			payload = 100 + g.rng.IntN(mss-100)
		}
	}
	hdr := ethIPTCP
	if f.udp {
		hdr = ethIPUDP
	}
	b := make([]byte, hdr+payload)
	g.frame(b, f, payload, f.kind)
	return b
}

// frame writes Ethernet, IPv4 and TCP or UDP headers for flow f and a
// payload of n bytes of kind k into b.
func (g *generator) frame(b []byte, f *flow, n int, k payloadKind) {
	copy(b, []byte{0x52, 0x54, 0, 0x12, 0x35, 2, 0x52, 0x54, 0, 0xa1, 0x3c, byte(f.src[3]), 0x08, 0x00})
	ip := b[ethLen:]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(min(len(ip), 65535)))
	f.ipid++
	binary.BigEndian.PutUint16(ip[4:], f.ipid)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // don't fragment
	ip[8] = 64
	copy(ip[12:], f.src[:])
	copy(ip[16:], f.dst[:])
	l4 := ip[ipLen:]
	if f.udp {
		ip[9] = 17
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint16(l4[4:], uint16(min(len(l4), 65535)))
		g.payload(l4[udpLen:], k)
	} else {
		ip[9] = 6
		binary.BigEndian.PutUint16(l4[0:], f.sport)
		binary.BigEndian.PutUint16(l4[2:], f.dport)
		binary.BigEndian.PutUint32(l4[4:], f.seq)
		binary.BigEndian.PutUint32(l4[8:], f.ack)
		l4[12] = 5 << 4
		l4[13] = 0x10 // ACK
		if n > 0 {
			l4[13] |= 0x08 // PSH
		}
		binary.BigEndian.PutUint16(l4[14:], uint16(500+g.rng.IntN(64000)))
		f.seq += uint32(n)
		f.ack += uint32(g.rng.IntN(3) * mss)
		g.payload(l4[tcpLen:], k)
	}
	binary.BigEndian.PutUint16(ip[10:], checksum(0, ip[:ipLen]))
	// Transport checksum over the pseudo-header and segment.
	sum := pseudoSum(ip)
	ck := 16
	if f.udp {
		ck = 6
	}
	binary.BigEndian.PutUint16(l4[ck:], checksum(sum, l4))
}

func pseudoSum(ip []byte) uint32 {
	var s uint32
	for i := 12; i < 20; i += 2 {
		s += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	return s + uint32(ip[9]) + uint32(len(ip)-ipLen)
}

func checksum(s uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

func (g *generator) payload(p []byte, k payloadKind) {
	switch k {
	case payloadTLS:
		if len(p) >= 5 { // TLS application data record header
			p[0], p[1], p[2] = 0x17, 3, 3
			binary.BigEndian.PutUint16(p[3:], uint16(len(p)-5))
			fillRandom(g.rng, p[5:])
		} else {
			fillRandom(g.rng, p)
		}
	case payloadHTTP:
		g.text(p)
	case payloadDNS:
		g.dns(p)
	}
}

func fillRandom(rng *rand.Rand, p []byte) {
	for len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, rng.Uint64())
		p = p[8:]
	}
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
}

var words = []string{
	"status", "ok", "error", "user", "session", "items", "price", "count",
	"name", "id", "created", "updated", "region", "eu-west-1", "us-east-2",
	"request", "response", "latency_ms", "true", "false", "null", "cache",
	"hit", "miss", "payload", "order", "customer", "product", "quantity",
	"currency", "EUR", "USD", "shipping", "address", "street", "city",
	"Berlin", "Lisbon", "Austin", "token", "expires", "scope", "read",
	"write", "admin", "trace_id", "span_id", "service", "checkout",
	"inventory", "search", "query", "results", "page", "limit", "offset",
}

var httpHeads = []string{
	"GET /api/v1/orders?page=%d&limit=50 HTTP/1.1\r\nHost: shop.internal\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36\r\nAccept: application/json\r\nAccept-Encoding: identity\r\nCookie: session=%08x\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\nCache-Control: no-store\r\nDate: Thu, 01 Jan 2026 00:00:00 GMT\r\nX-Request-Id: %08x\r\n\r\n",
	"POST /api/v1/checkout HTTP/1.1\r\nHost: shop.internal\r\nContent-Type: application/json\r\nContent-Length: %d\r\nAuthorization: Bearer %08x\r\n\r\n",
}

// text fills p with an HTTP message: a head, then JSON objects made of
// a small vocabulary, cut at len(p).
func (g *generator) text(p []byte) {
	b := p[:0]
	if g.rng.IntN(3) > 0 {
		b = fmt.Appendf(b, httpHeads[g.rng.IntN(len(httpHeads))], g.rng.IntN(5000), g.rng.Uint32())
	}
	for len(b) < len(p) {
		b = fmt.Appendf(b, `{"id":%d,"%s":"%s","%s":%d,"%s":"%s","tags":["%s","%s"]},`,
			g.rng.IntN(1e6), g.word(), g.word(), g.word(), g.rng.IntN(10000), g.word(), g.word(), g.word(), g.word())
	}
	copy(p, b) // b grew past p's capacity: copy what fits
}

func (g *generator) word() string { return words[g.rng.IntN(len(words))] }

// dns fills p with a DNS query or answer header and a name.
func (g *generator) dns(p []byte) {
	b := p[:0]
	b = binary.BigEndian.AppendUint16(b, uint16(g.rng.Uint32()))
	b = append(b, 0x81, 0x80, 0, 1, 0, 1, 0, 0, 0, 0)
	for _, label := range []string{g.word(), "svc", "cluster", "local"} {
		b = append(b, byte(len(label)))
		b = append(b, label...)
	}
	b = append(b, 0, 0, 1, 0, 1)
	for len(b) < len(p) {
		b = append(b, 0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4, 172, 16, byte(g.rng.IntN(4)), byte(g.rng.IntN(255)))
	}
	copy(p, b)
}
