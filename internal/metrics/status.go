package metrics

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/store"
)

// Status is the collector's status page (GET /status), a JSON object.
type Status struct {
	Time time.Time `json:"time"`
	// RateWindow is the span the rates are measured over: the last
	// DefaultRateWindow, or since the collector started if shorter.
	RateWindow float64       `json:"rate_window_seconds"`
	Agents     []AgentStatus `json:"agents"`
	// Retention is what retention keeps and whether it keeps up.
	Retention RetentionStatus `json:"retention"`
	// Kafka is a writer's consumer; absent for a collector.
	Kafka *KafkaStatus `json:"kafka,omitempty"`
}

// KafkaStatus is a writer's part of Status: the partitions of the topic
// assigned to it now and how far behind it is.
type KafkaStatus struct {
	Topic      string            `json:"topic"`
	Group      string            `json:"group"`
	Partitions []PartitionStatus `json:"partitions"`
	// Lag is the sum of the partitions' known lags, in records.
	Lag int64 `json:"lag_records"`
}

// PartitionStatus is one assigned partition (kafkaio.PartitionState;
// -1 where not known yet).
type PartitionStatus struct {
	Partition int32 `json:"partition"`
	Committed int64 `json:"committed_offset"`
	End       int64 `json:"end_offset"`
	Lag       int64 `json:"lag_records"`
}

// RetentionStatus is the retention part of Status.
type RetentionStatus struct {
	RootBytes int64 `json:"root_bytes"` // the agents' data files, closed and open
	// Short names the rules over their limit with nothing more they may
	// delete (on a full disk, writes fail: nothing unwritten is
	// acknowledged); empty when retention keeps up.
	Short []string `json:"short,omitempty"`
}

// AgentStatus is one agent name's row. Counters are since the collector
// started; drops are the agent's own, as its last stats report said
// (since the agent process started).
type AgentStatus struct {
	Name      string    `json:"name"`
	Host      string    `json:"host"`
	Version   string    `json:"version"`   // the agent's software version; "" when it did not tell (an older agent, UDP)
	Address   string    `json:"address"`   // of the latest session
	Transport string    `json:"transport"` // tcp, tls or udp
	Connected bool      `json:"connected"`
	Since     time.Time `json:"connected_since,omitzero"` // when the latest session began

	PacketsPerSecond float64 `json:"packets_per_second"` // written, over the rate window
	BytesPerSecond   float64 `json:"bytes_per_second"`   // captured bytes written, over the rate window

	Packets     uint64 `json:"packets"`
	Bytes       uint64 `json:"bytes"`
	DiskBytes   uint64 `json:"disk_bytes"`
	KernelDrops uint64 `json:"kernel_drops"`
	AgentDrops  uint64 `json:"agent_drops"`
	LostBatches uint64 `json:"lost_batches"`
	Duplicates  uint64 `json:"duplicate_batches"`

	// LastSeq is the sequence number of the last batch received,
	// AckedSeq the highest every batch up to which is written and
	// acknowledged; Lag is LastSeq - AckedSeq, the batches written but
	// not yet acknowledged (0 when AckedSeq is ahead).
	LastSeq   uint64    `json:"last_seq"`
	AckedSeq  uint64    `json:"acked_seq"`
	Lag       uint64    `json:"lag_batches"`
	LastBatch time.Time `json:"last_batch,omitzero"`

	// OldestPacket is the time of the oldest packet still kept in the
	// agent's files (retention deletes from the oldest); KeptBytes
	// their size, closed and open.
	OldestPacket time.Time `json:"oldest_packet,omitzero"`
	KeptBytes    int64     `json:"kept_bytes"`

	// Disconnected is when the latest session ended; absent while it
	// is up (and before any).
	Disconnected time.Time `json:"disconnected_at,omitzero"`
	// Interfaces are the agent's interfaces as its hello and later
	// declarations gave them, with the counters of its last stats
	// report (since the agent started); absent for an ingest
	// collector's agents.
	Interfaces []InterfaceStatus `json:"interfaces,omitempty"`
}

// InterfaceStatus is one interface of an agent in Status.
type InterfaceStatus struct {
	Name     string `json:"name"`
	LinkType uint16 `json:"link_type"` // LINKTYPE_*
	SnapLen  uint32 `json:"snaplen"`
	// Reported: the agent sent counters for it; the counters are 0
	// otherwise.
	Reported    bool   `json:"reported"`
	Received    uint64 `json:"received"` // seen by the kernel socket
	KernelDrops uint64 `json:"kernel_drops"`
	Captured    uint64 `json:"captured"` // read from the ring by the agent
}

// DefaultRateWindow is the span status rates are measured over.
const DefaultRateWindow = 10 * time.Second

// StatusPage serves Status for a collector. Run samples the counters
// once a second for the rates; without it, rates are since the first
// request.
type StatusPage struct {
	core  *collector.Core
	udp   *collector.UDPServer
	kafka Consumer // a writer's; nil for a collector

	mu      sync.Mutex
	samples []sample // oldest first, spanning at most DefaultRateWindow
}

type sample struct {
	at    time.Time
	count map[string][2]uint64 // agent: packets, bytes
}

// NewStatusPage returns the status page of core (and udp, if not nil).
func NewStatusPage(core *collector.Core, udp *collector.UDPServer) *StatusPage {
	return &StatusPage{core: core, udp: udp}
}

// WatchWriter adds a writer's partitions to the status.
func (p *StatusPage) WatchWriter(w Consumer) { p.kafka = w }

// Run samples the counters every second until ctx ends.
func (p *StatusPage) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	p.Status() // the first sample: rates from now on
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			p.Status()
		}
	}
}

// Status returns the status now, and records it as a sample.
func (p *StatusPage) Status() Status {
	now := time.Now()
	agents := agentSnaps(p.core, p.udp)
	cur := sample{at: now, count: make(map[string][2]uint64, len(agents))}
	for _, a := range agents {
		cur.count[a.Name] = [2]uint64{a.Packets, a.Bytes}
	}
	p.mu.Lock()
	for len(p.samples) > 0 && now.Sub(p.samples[0].at) > DefaultRateWindow {
		p.samples = p.samples[1:]
	}
	base := cur
	if len(p.samples) > 0 {
		base = p.samples[0]
	}
	p.samples = append(p.samples, cur)
	p.mu.Unlock()

	var rs store.RetainStats
	if st := p.core.Store(); st != nil { // nil for an ingest collector
		rs = st.RetainStats()
	}
	kept := make(map[string]store.AgentRetention, len(rs.Agents))
	for _, a := range rs.Agents {
		kept[a.Name] = a
	}
	st := Status{Time: now.UTC(), Agents: make([]AgentStatus, len(agents)),
		Retention: RetentionStatus{RootBytes: rs.RootBytes, Short: rs.Short}}
	if p.kafka != nil {
		st.Kafka = kafkaStatus(p.kafka)
	}
	dt := now.Sub(base.at).Seconds()
	st.RateWindow = dt
	for i, a := range agents {
		row := AgentStatus{Name: a.Name, Host: a.Host, Version: a.Version, Address: a.Peer.Addr, Transport: a.Peer.Transport,
			Connected: a.Connected, Since: a.Since.UTC(), Packets: a.Packets, Bytes: a.Bytes, DiskBytes: a.DiskBytes,
			KernelDrops: a.KernelDrops, AgentDrops: a.AgentDrops, LostBatches: a.lost, Duplicates: a.Duplicates,
			LastSeq: a.LastSeqReceived, AckedSeq: a.LastSeqAcked, Lag: a.Lag, LastBatch: a.LastBatch.UTC(),
			OldestPacket: kept[a.Name].Oldest, KeptBytes: kept[a.Name].Bytes, Disconnected: a.Ended.UTC()}
		for _, ifc := range a.Interfaces {
			row.Interfaces = append(row.Interfaces, InterfaceStatus{Name: ifc.Name, LinkType: ifc.LinkType, SnapLen: ifc.SnapLen,
				Reported: ifc.HaveStats, Received: ifc.Received, KernelDrops: ifc.KernelDrops, Captured: ifc.Captured})
		}
		if prev := base.count[a.Name]; dt > 0 { // an agent new in the window started from 0
			row.PacketsPerSecond = float64(a.Packets-prev[0]) / dt
			row.BytesPerSecond = float64(a.Bytes-prev[1]) / dt
		}
		st.Agents[i] = row
	}
	return st
}

// ServeHTTP serves the status as JSON.
func (p *StatusPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(p.Status())
}

func kafkaStatus(w Consumer) *KafkaStatus {
	ks := &KafkaStatus{Topic: w.Topic(), Group: w.Group(), Partitions: []PartitionStatus{}}
	for _, p := range w.Partitions() {
		ks.Partitions = append(ks.Partitions, PartitionStatus{Partition: p.Partition, Committed: p.Committed, End: p.End, Lag: p.Lag})
		ks.Lag += max(p.Lag, 0)
	}
	return ks
}
