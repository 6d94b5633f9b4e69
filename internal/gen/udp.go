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

// UDPConfig describes a bounded UDP send.
type UDPConfig struct {
	To     netip.AddrPort
	Stream uint32
	Count  uint64
	Rate   int // packets per second; 0 means as fast as possible
	Sizes  []int
}

// SendUDP sends Count datagrams with generated payloads (sequence 0 to
// Count-1), paced to Rate, and returns the number sent. It stops early
// when ctx ends.
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
	buf := make([]byte, 65507)
	start := time.Now()
	var sent uint64
	for seq := range c.Count {
		if ctx.Err() != nil {
			return sent, ctx.Err()
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
