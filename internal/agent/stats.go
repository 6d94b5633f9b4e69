package agent

import "github.com/pcapsync/pcapsync/internal/wire"

// Stats is a snapshot of an agent's counters, all cumulative since New
// except the gauges Connected, UnackedBatches and UnackedBytes. It is
// what the metrics surface exports (internal/metrics).
type Stats struct {
	Summary // the closing line's counters, so far

	Interfaces []IfaceStats // per source: a live interface, or the replayed file

	BatchesSent    uint64 // batches written to the collector for the first time (TCP) or sent (UDP)
	BatchesAcked   uint64 // batches the collector acknowledged (TCP; 0 over UDP)
	BatchesResent  uint64 // writes of a batch again after a reconnect
	UnackedBatches int    // batches queued (memory and spool), not acknowledged yet
	UnackedBytes   int64  // their frames' bytes
	SealedPackets  uint64 // packets this run sealed into batches (queued, memory or spool); not those recovered from a previous run's spool
	Connected      bool   // a TCP session with the collector is up (always false over UDP)
}

// IfaceStats are one source's counters: a live interface's, or a
// replayed file's (its packets as one entry, named after its first
// interface; no kernel counters).
type IfaceStats struct {
	Name         string
	Captured     uint64 // packets read from the ring (or the file), rate-limited ones included
	Bytes        uint64 // their captured bytes
	KernelDrops  uint64 // the ring was full (PACKET_STATISTICS)
	QueueFreezes uint64 // the kernel stopped filling the ring until a block was freed
}

// Stats returns the agent's counters now. Safe for concurrent use,
// also while Run runs and after it returned; it costs one lock of the
// queue and a getsockopt per live interface, nothing on the packet path.
func (a *Agent) Stats() Stats {
	st := a.counters()
	ifs := a.interfaces()
	var ws wire.Stats
	for _, s := range a.sources {
		ws.Interfaces = ws.Interfaces[:0]
		s.stats(&ws)
		if len(ws.Interfaces) == 0 {
			continue // a replay before its first packet
		}
		is := ws.Interfaces[0]
		name := ""
		if int(is.Index) < len(ifs) {
			name = ifs[is.Index].Name
		}
		st.Interfaces = append(st.Interfaces, IfaceStats{Name: name, Captured: is.Captured, Bytes: s.capturedBytes(),
			KernelDrops: is.KernelDrops, QueueFreezes: is.QueueFreezes})
	}
	return st
}
