package capgen

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
)

// Link is a link type as a capture file names it, with the byte order
// the file is written in (BSD null's address family is in the writer's
// byte order, so a big-endian file is a case of its own).
type Link struct {
	Name      string
	Type      uint32 // the pcap LINKTYPE_ value
	BigEndian bool
}

// Links are the link types Generate writes, in the order a run cycles
// through them.
var Links = []Link{
	{"en10mb", 1, false},
	{"sll", 113, false},
	{"sll2", 276, false},
	{"raw", 101, false},
	{"ipv4", 228, false},
	{"ipv6", 229, false},
	{"null", 0, false},
	{"null-be", 0, true},
	{"loop", 108, false},
	{"ieee802_11", 105, false},
	{"radiotap", 127, false},
	{"en10mb-be", 1, true},
}

// LinkByName returns the Link called name.
func LinkByName(name string) (Link, error) {
	for _, l := range Links {
		if l.Name == name {
			return l, nil
		}
	}
	return Link{}, fmt.Errorf("capgen: %q: %w", name, ErrLink)
}

// Config says which capture Generate makes.
type Config struct {
	Seed    uint64
	Index   int   // the capture's number in a run: a different stream of the seed
	Link    Link  // its link type
	Packets int   // how many packets; 0 means 500
	Start   int64 // the first timestamp, Unix ns; captures of one Start tie
}

// Packet is one record of a capture.
type Packet struct {
	TS      int64 // Unix ns (a multiple of 1000 in a microsecond file)
	OrigLen uint32
	Data    []byte // the captured bytes
}

// Capture is a generated capture and what its packets hold, for the
// filters made on it.
type Capture struct {
	Name       string // c<index>-<link name>
	Link       Link
	Nanosecond bool
	SnapLen    uint32
	Packets    []Packet

	// What the packets carry, each value once, in order of first use.
	Addrs4, Addrs6 []string
	Ports          []int
	MACs           []string
	Protos         []int
}

// Pools: the values packets are made of. Small, so that filters on
// them hit; with the edge cases a filter meets (broadcast, multicast,
// ports 0 and 65535, 43 and 53 for octal 053 and hex 0x35).
var (
	pool4 = []string{"10.0.0.1", "10.0.0.2", "10.0.1.7", "192.168.1.10", "192.168.1.255", "172.16.0.1", "224.0.0.251", "255.255.255.255", "0.0.0.0"}
	pool6 = []string{"2001:db8::1", "2001:db8::2", "2001:db8:1::9", "fe80::1", "ff02::1", "::1"}
	poolM = []string{"00:11:22:33:44:01", "00:11:22:33:44:02", "02:00:00:00:00:0a", "ff:ff:ff:ff:ff:ff", "01:00:5e:00:00:fb", "33:33:00:00:00:01"}
	poolP = []int{53, 80, 443, 43, 35, 8080, 1234, 0, 65535, 123, 5060, 22}

	// Rare values, one draw in two hundred: most index blocks lack them, so a
	// query for one reads few blocks, and a block whose only holder is
	// a cut or odd packet tells whether the index saw it as libpcap does.
	rare4 = []string{"10.9.9.9", "198.51.100.7"}
	rare6 = []string{"2001:db8:dead::1"}
	rareP = []int{31337, 7777, 64}
)

// Generate makes the capture c describes.
func Generate(c Config) *Capture {
	if c.Packets == 0 {
		c.Packets = 500
	}
	rng := rand.New(rand.NewPCG(c.Seed, uint64(c.Index)*0x9e3779b97f4a7c15+1))
	cp := &Capture{
		Name:       fmt.Sprintf("c%02d-%s", c.Index, c.Link.Name),
		Link:       c.Link,
		Nanosecond: rng.IntN(2) == 0,
		SnapLen:    65535,
	}
	g := &pktgen{rng: rng, c: cp}
	ts := c.Start
	// One capture in four starts with 3/4 of its packets (at most 1500,
	// about 300 KiB: more than the smallest reorder window, less than a
	// file) an hour late, as a file replayed after a newer one: a reader
	// must keep reading past more packets after a bound than its window
	// holds.
	lateHead := c.Index%4 == 3
	late := min(c.Packets*3/4, 1500)
	for i := range c.Packets {
		ts = g.nextTS(ts, c.Start)
		if lateHead && i == late {
			ts = c.Start
		}
		data, hdr := g.frame()
		orig := uint32(len(data))
		switch r := rng.IntN(10); {
		case r < 3 && hdr > 0: // cut by a snaplen inside the headers
			data = data[:1+rng.IntN(min(hdr+3, len(data)))]
		case r == 3 && len(data) > hdr+1: // cut inside the payload
			data = data[:hdr+1+rng.IntN(len(data)-hdr-1)]
		}
		t := ts
		if !cp.Nanosecond {
			t -= t % 1000
		}
		if lateHead && i < late {
			t += 3600e9
		}
		cp.Packets = append(cp.Packets, Packet{TS: t, OrigLen: orig, Data: data})
	}
	return cp
}

// nextTS: mostly forwards on a microsecond grid (ties within and across
// captures), sometimes back a little, rarely back to near the start.
func (g *pktgen) nextTS(ts, start int64) int64 {
	r := g.rng.IntN(100)
	switch {
	case r < 35: // a tie
	case r < 90:
		ts += int64(1+g.rng.IntN(2000)) * 1000
	case r < 98:
		ts -= int64(g.rng.IntN(50)) * 1000
	default:
		ts = start + int64(g.rng.IntN(20))*1000
	}
	if g.c.Nanosecond && g.rng.IntN(5) == 0 {
		ts += int64(g.rng.IntN(1000))
	}
	return max(ts, start)
}

// WriteFile writes c as a classic pcap file at path.
func (c *Capture) WriteFile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("capgen: %w", err)
	}
	w := bufio.NewWriter(f)
	if err := c.Write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("capgen: writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("capgen: writing %s: %w", path, err)
	}
	return nil
}

// Write writes c as a classic pcap file in its byte order.
func (c *Capture) Write(w io.Writer) error {
	var bo binary.ByteOrder = binary.LittleEndian
	if c.Link.BigEndian {
		bo = binary.BigEndian
	}
	magic := uint32(0xa1b2c3d4)
	if c.Nanosecond {
		magic = 0xa1b23c4d
	}
	h := make([]byte, 24)
	bo.PutUint32(h[0:], magic)
	bo.PutUint16(h[4:], 2)
	bo.PutUint16(h[6:], 4)
	bo.PutUint32(h[16:], c.SnapLen)
	bo.PutUint32(h[20:], c.Link.Type)
	if _, err := w.Write(h); err != nil {
		return fmt.Errorf("capgen: %w", err)
	}
	for _, p := range c.Packets {
		sub := p.TS % 1e9
		if !c.Nanosecond {
			sub /= 1000
		}
		rec := make([]byte, 16, 16+len(p.Data))
		bo.PutUint32(rec[0:], uint32(p.TS/1e9))
		bo.PutUint32(rec[4:], uint32(sub))
		bo.PutUint32(rec[8:], uint32(len(p.Data)))
		bo.PutUint32(rec[12:], p.OrigLen)
		if _, err := w.Write(append(rec, p.Data...)); err != nil {
			return fmt.Errorf("capgen: %w", err)
		}
	}
	return nil
}

// Range returns the window [since, until) a windowed query of c uses:
// from the timestamp at a quarter of its sorted packets to the one at
// three quarters, so that both edges fall on packets (and ties).
func (c *Capture) Range() (since, until int64) { return c.span(1, 4, 3, 4) }

// EarlyRange returns the window of the earliest 20% of c's packets.
func (c *Capture) EarlyRange() (since, until int64) { return c.span(0, 1, 1, 5) }

// span: from the packet at a/b of the sorted packets to the one at c/d.
func (c *Capture) span(a, b, e, f int) (since, until int64) {
	ts := make([]int64, len(c.Packets))
	for i, p := range c.Packets {
		ts[i] = p.TS
	}
	slices.Sort(ts)
	if len(ts) == 0 {
		return 0, 1
	}
	since, until = ts[len(ts)*a/b], ts[len(ts)*e/f]
	if until <= since {
		until = since + 1
	}
	return since, until
}

func note[T comparable](s *[]T, v T) {
	if !slices.Contains(*s, v) {
		*s = append(*s, v)
	}
}

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func mac(s string) []byte {
	b := make([]byte, 0, 6)
	for _, x := range strings.Split(s, ":") {
		var v byte
		fmt.Sscanf(x, "%02x", &v)
		b = append(b, v)
	}
	return b
}
