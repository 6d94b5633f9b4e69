package collector

import (
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// AgentStats is a snapshot of one agent name's state, over all its
// sessions since the collector started: what Core.AgentStats returns
// for the metrics surface and the status page.
type AgentStats struct {
	Name      string
	Host      string    // as the agent's last hello said
	Version   string    // the agent's software version as its latest session told it; "" when it did not
	Connected bool      // a session is up
	Peer      Peer      // of the latest session
	Since     time.Time // when the latest session began
	Ended     time.Time // when the latest session ended; zero while it is up

	Batches, Packets, Bytes uint64 // written and committed
	DiskBytes               uint64 // bytes that reached its files on disk (compressed size with --file-compress)
	Duplicates              uint64 // batches received again and dropped
	MissingBatches          uint64 // batches a TCP session's sequence skipped: lost

	// LastSeqReceived is the sequence of the last batch received (of
	// the latest instance), LastSeqAcked the high-water mark of the
	// latest session's instance: every batch up to it is in a file and
	// was acknowledged. Lag is LastSeqReceived - LastSeqAcked (0 when
	// the acknowledged mark is ahead, after a restart of the agent).
	LastSeqReceived, LastSeqAcked, Lag uint64
	LastBatch                          time.Time // when the last batch arrived; zero before any

	// The agent's own counters as its last Stats frame reported them
	// (cumulative since the agent process started): packets captured,
	// dropped by the kernel (all interfaces) and by the agent (queue
	// full, rate limit). ReportTime is zero before any report.
	Captured, KernelDrops, AgentDrops uint64
	ReportTime                        time.Time

	// Interfaces are the agent's interfaces (its hello's and those it
	// declared since) with their counters as its last Stats frame
	// reported them; nil for an ingest collector's agent.
	Interfaces []store.IfaceStats
}

// AgentStats returns every agent name seen since start, sorted by name.
// Safe for concurrent use; it takes each agent's store.Writer lock
// briefly and reads counters kept per batch or per commit, nothing per
// packet.
func (c *Core) AgentStats() []AgentStats {
	type entry struct {
		ag     *agent
		app    appender
		active bool
		last   *session
		ended  time.Time
	}
	c.mu.Lock()
	ents := make([]entry, 0, len(c.agents))
	for _, ag := range c.agents {
		e := entry{ag: ag, app: ag.app, active: ag.active != nil, last: ag.last}
		if e.last != nil {
			e.ended = e.last.ended
		}
		ents = append(ents, e)
	}
	c.mu.Unlock()
	out := make([]AgentStats, 0, len(ents))
	for _, e := range ents {
		ag := e.ag
		st := AgentStats{Name: ag.name, Connected: e.active,
			Batches: ag.batches.Load(), Packets: ag.packets.Load(), Bytes: ag.bytes.Load(),
			Duplicates: ag.duplicates.Load(), MissingBatches: ag.missing.Load(),
			LastSeqReceived: ag.lastRecv.Load()}
		if ns := ag.lastBatch.Load(); ns != 0 {
			st.LastBatch = time.Unix(0, ns)
		}
		if s := e.last; s != nil {
			st.Peer, st.Since, st.Host, st.Ended = s.peer, s.since, s.hello.Host, e.ended
			st.LastSeqAcked = s.app.durable()
			if v := s.version.Load(); v != nil {
				st.Version = *v
			}
		}
		if st.LastSeqReceived > st.LastSeqAcked {
			st.Lag = st.LastSeqReceived - st.LastSeqAcked
		}
		e.app.fill(&st)
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b AgentStats) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Dir returns the absolute output directory; "" for an ingest
// collector.
func (c *Core) Dir() string { return c.dest.dir() }

// ReadMemory returns the state of the TCP connections' frame memory
// (Config.ReadMemory): bytes reserved, connections waiting for memory.
// Safe for concurrent use.
func (c *Core) ReadMemory() wire.MemoryStats { return c.mem.Stats() }
