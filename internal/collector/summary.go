package collector

import (
	"fmt"
	"maps"
	"slices"
)

// Summary is what a collector did since start: the counters of its
// closing lines, the core's and its store's, and with UDP the UDP
// server's. String renders the totals line, Details the lines that
// follow it, UDPAgentSummary.String the lines before it (each without
// the process's "pcapsync collector: " prefix). Its JSON form is one
// object whose keys are the field names in snake_case, every key always
// present but "udp", which only a collector serving UDP has.
type Summary struct {
	Sessions       uint64 `json:"sessions"`        // handshakes accepted
	Rejected       uint64 `json:"rejected"`        // handshakes refused: TLS, token, identity, hello
	ProtocolErrors uint64 `json:"protocol_errors"` // connections closed for a malformed or unexpected frame
	Batches        uint64 `json:"batches"`         // batches written
	Packets        uint64 `json:"packets"`         // packets written
	Bytes          uint64 `json:"bytes"`           // captured bytes written
	Duplicates     uint64 `json:"duplicates"`      // batches received again and dropped
	FileErrors     uint64 `json:"file_errors"`     // failed file operations (store.Counters.FileErrors)
	PeerTimeouts   uint64 `json:"peer_timeouts"`   // sessions ended because the agent sent nothing for the peer timeout
	OverLimit      uint64 `json:"over_limit"`      // connections closed at once because MaxConns were open

	Truncated      uint64 `json:"truncated"`       // packets cut to their link type's limit, original length kept (store.Counters.Truncated)
	MissingBatches uint64 `json:"missing_batches"` // batches TCP sessions' sequences skipped: lost for good

	Compressed  uint64 `json:"compressed"`    // compressed batches received (duplicates included)
	WireBytes   uint64 `json:"wire_bytes"`    // their records sections as received
	RawBytes    uint64 `json:"raw_bytes"`     // and decompressed
	BadCompress uint64 `json:"bad_compress"`  // batches refused: compressed bytes corrupt
	TooLargeRaw uint64 `json:"too_large_raw"` // batches refused: would decompress past MaxFrame

	UDP *UDPSummary `json:"udp,omitempty"` // nil without a UDP server
}

// UDPSummary is what a UDPServer received: its own counters, the totals
// over its agents, and each agent's counts.
type UDPSummary struct {
	Datagrams      uint64 `json:"datagrams"`       // datagrams read and handled (UDPCounters.Datagrams)
	BatchDatagrams uint64 `json:"batch_datagrams"` // the agents' Received
	Lost           uint64 `json:"lost"`            // the agents' Lost
	Reordered      uint64 `json:"reordered"`       // the agents' Reordered
	Late           uint64 `json:"late"`            // the agents' Late
	Malformed      uint64 `json:"malformed"`       // UDPCounters.Malformed (from any source)
	Unknown        uint64 `json:"unknown"`         // UDPCounters.Unknown: from a source without a session
	Incomplete     uint64 `json:"incomplete"`      // the agents' Incomplete
	Evicted        uint64 `json:"evicted"`         // UDPCounters.Evicted (also in Incomplete)

	Agents []UDPAgentSummary `json:"agents"` // sorted by name; empty, not null, without any
}

// UDPAgentSummary is one agent name's UDP counts, for its line of the
// summary.
type UDPAgentSummary struct {
	Name string `json:"name"`
	UDPAgentCounts
}

// Summary returns the core's counters now, and its store's; UDP is nil.
// Safe for concurrent use; final once Close returned.
func (c *Core) Summary() Summary {
	k, st := &c.Counters, c.dest.counters()
	return Summary{
		Sessions: k.Sessions.Load(), Rejected: k.Rejected.Load(), ProtocolErrors: k.ProtocolErrors.Load(),
		Batches: k.Batches.Load(), Packets: k.Packets.Load(), Bytes: k.Bytes.Load(), Duplicates: k.Duplicates.Load(),
		FileErrors: st.FileErrors.Load(), PeerTimeouts: k.PeerTimeouts.Load(), OverLimit: k.OverLimit.Load(),
		Truncated: st.Truncated.Load(), MissingBatches: k.MissingBatches.Load(),
		Compressed: k.Compressed.Load(), WireBytes: k.WireBytes.Load(), RawBytes: k.RawBytes.Load(),
		BadCompress: k.BadCompress.Load(), TooLargeRaw: k.TooLargeRaw.Load(),
	}
}

// Summary returns the UDP server's counters now, with each agent's
// (AgentCounts) sorted by name. Safe for concurrent use; final once
// Serve returned.
func (u *UDPServer) Summary() UDPSummary {
	agents := u.AgentCounts()
	s := UDPSummary{Datagrams: u.Counters.Datagrams.Load(), Malformed: u.Counters.Malformed.Load(),
		Unknown: u.Counters.Unknown.Load(), Evicted: u.Counters.Evicted.Load(),
		Agents: make([]UDPAgentSummary, 0, len(agents))}
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		a := agents[name]
		s.BatchDatagrams += a.Received
		s.Lost += a.Lost
		s.Reordered += a.Reordered
		s.Late += a.Late
		s.Incomplete += a.Incomplete
		s.Agents = append(s.Agents, UDPAgentSummary{Name: name, UDPAgentCounts: a})
	}
	return s
}

// String renders s as the collector's totals line, with the UDP totals
// when s.UDP is set.
func (s Summary) String() string {
	str := fmt.Sprintf("sessions %d, rejected %d, protocol errors %d, batches %d, packets %d, bytes %d, duplicates dropped %d, file errors %d, peer timeouts %d, over connection limit %d",
		s.Sessions, s.Rejected, s.ProtocolErrors, s.Batches, s.Packets, s.Bytes, s.Duplicates, s.FileErrors, s.PeerTimeouts, s.OverLimit)
	if u := s.UDP; u != nil {
		str += fmt.Sprintf(", udp datagrams %d, batch datagrams %d, lost %d, reordered %d, late %d, malformed %d, from unknown sources %d, incomplete batches %d (evicted %d)",
			u.Datagrams, u.BatchDatagrams, u.Lost, u.Reordered, u.Late, u.Malformed, u.Unknown, u.Incomplete, u.Evicted)
	}
	return str
}

// Details returns the lines that follow the totals line, each only when
// its counters are not zero: truncated packets, lost batches (the word
// LOST, for eyes and scripts), compression.
func (s Summary) Details() []string {
	var lines []string
	if s.Truncated > 0 {
		lines = append(lines, fmt.Sprintf("%d packets truncated to their link type's limit (original length kept)", s.Truncated))
	}
	if s.MissingBatches > 0 {
		lines = append(lines, fmt.Sprintf("LOST %d batches: agents' sequences skipped them (see the log's \"batches missing\" lines)", s.MissingBatches))
	}
	if s.Compressed+s.BadCompress+s.TooLargeRaw > 0 {
		lines = append(lines, fmt.Sprintf("compressed batches %d (records %d bytes as received, %d decompressed), refused: corrupt %d, over the size limit %d",
			s.Compressed, s.WireBytes, s.RawBytes, s.BadCompress, s.TooLargeRaw))
	}
	return lines
}

// String renders a as its line of the summary.
func (a UDPAgentSummary) String() string {
	return fmt.Sprintf("udp agent %s: datagrams %d, lost %d, reordered %d, duplicates %d, late %d, malformed %d, pieces %d, batches reassembled %d, incomplete %d",
		a.Name, a.Received, a.Lost, a.Reordered, a.Duplicates, a.Late, a.Malformed, a.Pieces, a.Reassembled, a.Incomplete)
}
