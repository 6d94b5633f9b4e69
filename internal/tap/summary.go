package tap

import "fmt"

// Summary is what a Tap served, for the collector's closing lines. Its
// JSON form is one object whose keys are the field names in snake_case.
type Summary struct {
	Clients     uint64 `json:"clients"`      // clients served, in total
	Rejected    uint64 `json:"rejected"`     // refused: TLS, request, token, filter, over MaxClients
	DroppedSlow uint64 `json:"dropped_slow"` // cut off: queue full or WriteTimeout without progress
	Packets     uint64 `json:"packets"`      // packets sent
	Bytes       uint64 `json:"bytes"`        // pcapng bytes sent, headers included
}

// Summary returns the tap's counters now. Safe for concurrent use;
// final once every Serve returned.
func (t *Tap) Summary() Summary {
	c := &t.Counters
	return Summary{Clients: c.Clients.Load(), Rejected: c.Rejected.Load(), DroppedSlow: c.DroppedSlow.Load(),
		Packets: c.Packets.Load(), Bytes: c.Bytes.Load()}
}

// String renders s as the tap's line of the collector's summary.
func (s Summary) String() string {
	return fmt.Sprintf("tap clients %d, refused %d, dropped as too slow %d, packets sent %d, bytes sent %d",
		s.Clients, s.Rejected, s.DroppedSlow, s.Packets, s.Bytes)
}
