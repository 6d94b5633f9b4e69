package gen

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// UDPSizes are the UDP payload sizes the sender cycles through: the
// smallest generated payload up to the most a 1500-byte MTU carries.
var UDPSizes = []int{PayloadHeader + 2, 100, 512, 1000, 1472}

// UDPSizes returns the UDP payload sizes, in the order to cycle
// through, that make the mix's Ethernet frames (no FCS) over IPv4:
// frame size minus 42 bytes of headers. Only Mix64 and MixIMIX, whose
// sizes repeat, are supported.
func (m Mix) UDPSizes() ([]int, error) {
	if m != Mix64 && m != MixIMIX {
		return nil, fmt.Errorf("gen: packet mix %q has no fixed UDP sizes (want 64 or imix)", m)
	}
	var sizes []int
	for i := range uint64(12) { // one IMIX cycle
		size, _ := m.Size(i, nil)
		sizes = append(sizes, size-14-20-8)
	}
	return sizes, nil
}

// UDPConfig describes a bounded UDP send: Count datagrams, or for
// Duration, whichever ends first.
type UDPConfig struct {
	To       netip.AddrPort
	Stream   uint32
	Count    uint64        // 0 means no limit (then Duration must be set)
	Duration time.Duration // 0 means no limit
	Rate     int           // packets per second; 0 means as fast as possible
	Sizes    []int
}

// SendUDP sends datagrams with generated payloads (sequence 0, 1, ...),
// paced to Rate, until Count are sent or Duration has passed, and
// returns the number sent. It stops early when ctx ends.
func SendUDP(ctx context.Context, c UDPConfig) (uint64, error) {
	sizes := c.Sizes
	if len(sizes) == 0 {
		sizes = UDPSizes
	}
	for _, s := range sizes {
		if s < PayloadHeader || s > 65507 {
			return 0, fmt.Errorf("gen: udp payload size %d out of range %d..65507", s, PayloadHeader)
		}
	}
	// Unconnected, so ICMP port-unreachable replies (nothing listens on
	// a capture target) do not fail later sends with ECONNREFUSED.
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return 0, fmt.Errorf("gen: %w", err)
	}
	defer conn.Close()
	if c.Count == 0 && c.Duration <= 0 {
		return 0, fmt.Errorf("gen: udp send needs a count or a duration")
	}
	buf := make([]byte, 65507)
	start := time.Now()
	var end time.Time
	if c.Duration > 0 {
		end = start.Add(c.Duration)
	}
	var sent uint64
	for seq := uint64(0); c.Count == 0 || seq < c.Count; seq++ {
		if ctx.Err() != nil {
			return sent, ctx.Err()
		}
		if !end.IsZero() && seq%64 == 0 && time.Now().After(end) {
			break
		}
		if c.Rate > 0 {
			due := start.Add(time.Duration(seq) * time.Second / time.Duration(c.Rate))
			if d := time.Until(due); d > 0 {
				time.Sleep(d)
			}
		}
		p := buf[:sizes[seq%uint64(len(sizes))]]
		Payload(p, c.Stream, seq)
		if _, err := conn.WriteToUDPAddrPort(p, c.To); err != nil {
			return sent, fmt.Errorf("gen: sending packet %d: %w", seq, err)
		}
		sent++
	}
	return sent, nil
}
