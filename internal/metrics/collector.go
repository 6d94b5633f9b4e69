package metrics

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// DefaultMaxAgents is how many agent names get their own "agent" label
// value by default; the rest are summed under OtherAgents.
const DefaultMaxAgents = 1000

// OtherAgents is the "agent" label value of the agents beyond the cap
// (the first MaxAgents names in sorted order keep their own). An agent
// name cannot contain "~", so it never collides with one.
const OtherAgents = "~other"

// Collector is a collector process's metrics: create it before
// collector.NewCore, give BatchWrite and Sync to the Config's
// BatchWriteLatency and SyncLatency, then Watch the core.
type Collector struct {
	Registry   *prometheus.Registry
	BatchWrite prometheus.Histogram
	Sync       prometheus.Histogram
	// Produce and RecordDelay are registered by WatchProducer and
	// WatchWriter.
	Produce, RecordDelay prometheus.Histogram
	maxAgents            int
}

// NewCollector returns a collector's registry, holding the Go and
// process collectors and the latency histograms so far. maxAgents caps
// the "agent" label values (0: DefaultMaxAgents; negative: no cap).
func NewCollector(maxAgents int) *Collector {
	if maxAgents == 0 {
		maxAgents = DefaultMaxAgents
	}
	m := &Collector{Registry: newRegistry(), maxAgents: maxAgents,
		BatchWrite: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pcapsync_collector_batch_write_seconds",
			Help:    "Time to check, decompress and write one batch into its file's buffer (duplicates excluded).",
			Buckets: steps(1e-5, 1),
		}),
		Sync: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pcapsync_collector_fsync_seconds",
			Help:    "Time of one fsync of a data file (per acknowledgement with --fsync batch, else per interval and at close).",
			Buckets: steps(1e-4, 10),
		})}
	m.Registry.MustRegister(m.BatchWrite, m.Sync)
	m.Produce, m.RecordDelay = newKafkaHistograms()
	return m
}

// Watch registers the collector that reads core's counters (and udp's,
// if not nil) at every scrape.
func (m *Collector) Watch(core *collector.Core, udp *collector.UDPServer) {
	m.Registry.MustRegister(&coreCollector{core: core, udp: udp, maxAgents: m.maxAgents})
}

type coreCollector struct {
	core      *collector.Core
	udp       *collector.UDPServer
	maxAgents int
}

// coreSnap is what one scrape reads of the whole collector.
type coreSnap struct {
	c                             *collector.Counters
	st                            *store.Counters
	mem                           wire.MemoryStats
	connected                     int
	udpDgrams, udpUnknown, udpBad uint64
	udpEvicted                    uint64
	udpReassemblyBytes            int64
	fsSize                        uint64
	fsFree                        uint64
	fsOK                          bool
	openFiles, maxOpenFiles       int
}

var coreFields = []field[coreSnap]{
	gauge("pcapsync_collector_agents_connected", "Agents with a session up (TCP or UDP).",
		func(s *coreSnap) float64 { return float64(s.connected) }),
	counter("pcapsync_collector_sessions_total", "Handshakes accepted.",
		func(s *coreSnap) float64 { return u(s.c.Sessions.Load()) }),
	counter("pcapsync_collector_handshakes_rejected_total", "Handshakes refused: TLS, token, identity, malformed hello.",
		func(s *coreSnap) float64 { return u(s.c.Rejected.Load()) }),
	counter("pcapsync_collector_connections_over_limit_total", "Connections (and UDP hellos) refused because --max-conns were open.",
		func(s *coreSnap) float64 { return u(s.c.OverLimit.Load()) }),
	counter("pcapsync_collector_peer_timeouts_total", "Sessions ended because the agent sent nothing for --peer-timeout.",
		func(s *coreSnap) float64 { return u(s.c.PeerTimeouts.Load()) }),
	counter("pcapsync_collector_compressed_batches_total", "Compressed batches received, duplicates included.",
		func(s *coreSnap) float64 { return u(s.c.Compressed.Load()) }),
	counter("pcapsync_collector_unchecked_batches_total", "Batches received without a checksum (agents inside TLS, or --checksum never), duplicates included.",
		func(s *coreSnap) float64 { return u(s.c.Unchecked.Load()) }),
	gauge("pcapsync_collector_read_memory_limit_bytes", "The read memory budget (--read-memory): frames being received over TCP, all connections.",
		func(s *coreSnap) float64 { return float64(s.mem.Limit) }),
	gauge("pcapsync_collector_read_memory_reserved_bytes", "Bytes of read memory reserved now for frames being received or handled.",
		func(s *coreSnap) float64 { return float64(s.mem.Reserved) }),
	gauge("pcapsync_collector_read_memory_waiting_connections", "Connections waiting for read memory now (not reading: TCP backpressure).",
		func(s *coreSnap) float64 { return float64(s.mem.Waiting) }),
	counter("pcapsync_collector_read_memory_waits_total", "Frames whose buffer had to wait for read memory.",
		func(s *coreSnap) float64 { return u(s.mem.Waits) }),
	counter("pcapsync_collector_read_memory_wait_seconds_total", "Time connections spent waiting for read memory, summed.",
		func(s *coreSnap) float64 { return s.mem.WaitTime.Seconds() }),
	counter("pcapsync_collector_udp_datagrams_total", "Datagrams read by the UDP transport.",
		func(s *coreSnap) float64 { return u(s.udpDgrams) }),
	counter("pcapsync_collector_udp_unknown_source_datagrams_total", "Datagrams from a source without a session (no hello yet), dropped.",
		func(s *coreSnap) float64 { return u(s.udpUnknown) }),
	counter("pcapsync_collector_udp_reassembly_evicted_batches_total", "Incomplete batches in pieces dropped to stay within --udp-reassembly-mem (also counted incomplete).",
		func(s *coreSnap) float64 { return u(s.udpEvicted) }),
	gauge("pcapsync_collector_udp_reassembly_bytes", "Memory held by batches in pieces being put back together.",
		func(s *coreSnap) float64 { return float64(s.udpReassemblyBytes) }),
}

// Fields of the store: a collector writing files, a writer; not an
// ingest collector.
var storeFields = []field[coreSnap]{
	counter("pcapsync_collector_file_errors_total", "Failed file operations (writes, syncs, closes, state saves).",
		func(s *coreSnap) float64 { return u(s.st.FileErrors.Load()) }),
	counter("pcapsync_collector_files_closed_total", "Data files closed complete (rotation, goodbye, idle close, shutdown).",
		func(s *coreSnap) float64 { return u(s.st.FilesClosed.Load()) }),
	counter("pcapsync_collector_files_rotated_total", "Data files closed because they reached --rotate-size or --rotate-interval.",
		func(s *coreSnap) float64 { return u(s.st.FilesRotated.Load()) }),
	counter("pcapsync_collector_truncated_packets_total", "Packets written cut to the longest captured length readers accept for their link type (an agent that did not cut them), original length kept.",
		func(s *coreSnap) float64 { return u(s.st.Truncated.Load()) }),
	counter("pcapsync_collector_index_errors_total", "Index writes that failed: the data file is left without an index (queries scan it; pcapsync index rebuilds it).",
		func(s *coreSnap) float64 { return u(s.st.IndexErrors.Load()) }),
	counter("pcapsync_collector_flow_errors_total", "Flow file writes that failed: the data file is left without its flow records (pcapsync index rebuilds them).",
		func(s *coreSnap) float64 { return u(s.st.FlowErrors.Load()) }),
	counter("pcapsync_collector_flow_records_total", "Flow records written to flow files (--flows).",
		func(s *coreSnap) float64 { return u(s.st.FlowRecords.Load()) }),
	counter("pcapsync_collector_flows_evicted_total", "Flows ended early because an agent's flow table held its bound (32768 flows): their next packets start a new record.",
		func(s *coreSnap) float64 { return u(s.st.FlowsEvicted.Load()) }),
	counter("pcapsync_collector_agent_dir_refused_total", "Agent sessions refused because the agent's directory below --dir is a symbolic link or not a directory (nothing of the agent written, nothing acknowledged).",
		func(s *coreSnap) float64 { return u(s.st.AgentDirRefused.Load()) }),
	gauge("pcapsync_collector_open_files", "Agent data files holding a file descriptor now (at most --max-open-files).",
		func(s *coreSnap) float64 { return float64(s.openFiles) }),
	gauge("pcapsync_collector_max_open_files", "The open-file budget in force (--max-open-files, or its default from RLIMIT_NOFILE); -1 for none.",
		func(s *coreSnap) float64 { return float64(max(s.maxOpenFiles, -1)) }),
	counter("pcapsync_collector_budget_parks_total", "Agent files closed to stay within --max-open-files while still in progress (kept .part, reopened when their agent writes again).",
		func(s *coreSnap) float64 { return u(s.st.BudgetParks.Load()) }),
	counter("pcapsync_collector_budget_reopens_total", "Parked agent files reopened for append.",
		func(s *coreSnap) float64 { return u(s.st.BudgetReopens.Load()) }),
}

var fsFields = []field[coreSnap]{
	gauge("pcapsync_collector_filesystem_size_bytes", "Size of the file system holding --dir.",
		func(s *coreSnap) float64 { return u(s.fsSize) }),
	gauge("pcapsync_collector_filesystem_avail_bytes", "Bytes of the file system holding --dir available to the collector.",
		func(s *coreSnap) float64 { return u(s.fsFree) }),
}

// Decode error kinds and rejection limits (labels "kind", "limit").
var (
	decodeErrors = prometheus.NewDesc("pcapsync_collector_decode_errors_total",
		"Frames or datagrams refused as malformed, by kind: protocol (a TCP connection closed for a malformed or unexpected frame), compression (corrupt compressed records), udp_malformed (a datagram dropped).",
		[]string{"kind"}, nil)
	batchesRejected = prometheus.NewDesc("pcapsync_collector_batches_rejected_total",
		"Batches refused by a limit, by limit: frame_size (over --max-frame or the records limit; the connection is closed), decompressed_size (would decompress past --max-frame).",
		[]string{"limit"}, nil)
)

// Retention (store.RetainStats, store.RetainCounters).
var (
	retainDeletedFiles = prometheus.NewDesc("pcapsync_collector_retention_deleted_files_total",
		"Closed files deleted by retention, by the rule that chose them: age (--retain-age), agent (--retain-agent-size), size (--retain-size), free (--retain-free).",
		[]string{"rule"}, nil)
	retainDeletedBytes = prometheus.NewDesc("pcapsync_collector_retention_deleted_bytes_total",
		"Bytes of the files deleted by retention, by rule.", []string{"rule"}, nil)
	retainShort = prometheus.NewDesc("pcapsync_collector_retention_short",
		"1 while a retention rule is over its limit with nothing more it may delete (each agent's newest file and the open ones are kept): on a full disk writes fail and nothing unwritten is acknowledged.",
		[]string{"rule"}, nil)
	retainShortTotal = prometheus.NewDesc("pcapsync_collector_retention_short_total",
		"Times a retention rule became unable to free enough.", nil, nil)
	retainForeign = prometheus.NewDesc("pcapsync_collector_retention_foreign_total",
		"Paths below --dir that the collector did not make (or links, FIFOs where it made files), left alone by retention and logged once each.", nil, nil)
	retainHolds = prometheus.NewDesc("pcapsync_collector_retention_write_holds_total",
		"Batch writes that waited at retention's write gate for deletion to catch up (usage near a --retain-size or --retain-free limit).", nil, nil)
	retainHeld = prometheus.NewDesc("pcapsync_collector_retention_write_held_seconds_total",
		"Seconds batch writes waited at retention's write gate, in all.", nil, nil)
	retainLimit = prometheus.NewDesc("pcapsync_collector_retention_limit_bytes",
		"A retention rule's limit: size, the root's bytes (--retain-size); free, the filesystem's used bytes (its size less --retain-free); agent, each agent's bytes (--retain-agent-size).",
		[]string{"rule"}, nil)
	retainHigh = prometheus.NewDesc("pcapsync_collector_retention_high_watermark_bytes",
		"Usage above which a retention rule starts deleting, below its limit by a margin that grows with the write rate.", []string{"rule"}, nil)
	retainLow = prometheus.NewDesc("pcapsync_collector_retention_low_watermark_bytes",
		"Usage down to which a retention rule deletes once started.", []string{"rule"}, nil)
	retainRootBytes = prometheus.NewDesc("pcapsync_collector_retention_root_bytes",
		"Bytes of the agents' data files below --dir, closed and open, as retention counts them.", nil, nil)
	retainOldest = prometheus.NewDesc("pcapsync_collector_agent_oldest_packet_timestamp_seconds",
		"Unix time of the oldest packet still kept in the agent's files (for the other agents: the oldest of them).", []string{"agent"}, nil)
)

// collectRetention emits retention's metrics; the agent label values
// are capped as the other per-agent metrics are.
func (c *coreCollector) collectRetention(ch chan<- prometheus.Metric) {
	st := c.core.Store()
	rc, rs := st.Retention(), st.RetainStats()
	for rule := range store.NumRules {
		name := rule.String()
		ch <- prometheus.MustNewConstMetric(retainDeletedFiles, prometheus.CounterValue, u(rc.Files[rule].Load()), name)
		ch <- prometheus.MustNewConstMetric(retainDeletedBytes, prometheus.CounterValue, u(rc.Bytes[rule].Load()), name)
		short := 0.0
		if slices.Contains(rs.Short, name) {
			short = 1
		}
		ch <- prometheus.MustNewConstMetric(retainShort, prometheus.GaugeValue, short, name)
	}
	ch <- prometheus.MustNewConstMetric(retainShortTotal, prometheus.CounterValue, u(rc.Short.Load()))
	ch <- prometheus.MustNewConstMetric(retainForeign, prometheus.CounterValue, u(rc.Foreign.Load()))
	ch <- prometheus.MustNewConstMetric(retainHolds, prometheus.CounterValue, u(rc.Holds.Load()))
	ch <- prometheus.MustNewConstMetric(retainHeld, prometheus.CounterValue, float64(rc.HeldNanos.Load())/1e9)
	ch <- prometheus.MustNewConstMetric(retainRootBytes, prometheus.GaugeValue, float64(rs.RootBytes))
	for _, l := range rs.Limits {
		ch <- prometheus.MustNewConstMetric(retainLimit, prometheus.GaugeValue, float64(l.Limit), l.Rule)
		ch <- prometheus.MustNewConstMetric(retainHigh, prometheus.GaugeValue, float64(l.High), l.Rule)
		ch <- prometheus.MustNewConstMetric(retainLow, prometheus.GaugeValue, float64(l.Low), l.Rule)
	}
	var other time.Time
	for i, a := range rs.Agents {
		switch {
		case a.Oldest.IsZero():
		case c.maxAgents < 0 || i < c.maxAgents:
			ch <- prometheus.MustNewConstMetric(retainOldest, prometheus.GaugeValue, unixSeconds(a.Oldest), a.Name)
		case other.IsZero() || a.Oldest.Before(other):
			other = a.Oldest
		}
	}
	if !other.IsZero() {
		ch <- prometheus.MustNewConstMetric(retainOldest, prometheus.GaugeValue, unixSeconds(other), OtherAgents)
	}
}

// agentSnap is one "agent" label value's numbers.
type agentSnap struct {
	collector.AgentStats
	lost       uint64  // TCP sequence gaps plus UDP datagrams lost
	incomplete uint64  // UDP batches in pieces dropped incomplete
	connected  float64 // 0 or 1; for OtherAgents how many
}

var perAgentFields = []field[agentSnap]{
	gauge("pcapsync_collector_agent_connected", "1 while the agent has a session up (for the other agents: how many have one).",
		func(s *agentSnap) float64 { return s.connected }, "agent"),
	counter("pcapsync_collector_batches_written_total", "Batches written to the agent's files and committed.",
		func(s *agentSnap) float64 { return u(s.Batches) }, "agent"),
	counter("pcapsync_collector_packets_written_total", "Packets written to the agent's files and committed.",
		func(s *agentSnap) float64 { return u(s.Packets) }, "agent"),
	counter("pcapsync_collector_written_bytes_total", "Captured bytes of the packets written (packet data, without pcapng framing).",
		func(s *agentSnap) float64 { return u(s.Bytes) }, "agent"),
	counter("pcapsync_collector_disk_written_bytes_total", "Bytes that reached the agent's files on disk (pcapng framing included; compressed size with --file-compress).",
		func(s *agentSnap) float64 { return u(s.DiskBytes) }, "agent"),
	counter("pcapsync_collector_duplicate_batches_total", "Batches received again (resent after a reconnect) and dropped.",
		func(s *agentSnap) float64 { return u(s.Duplicates) }, "agent"),
	counter("pcapsync_collector_lost_batches_total", "Batches that never arrived: gaps in a TCP session's sequence, UDP datagrams lost.",
		func(s *agentSnap) float64 { return u(s.lost) }, "agent"),
	counter("pcapsync_collector_udp_incomplete_batches_total", "UDP batches in pieces of which some arrived but not all in time (or over the reassembly limits): dropped.",
		func(s *agentSnap) float64 { return u(s.incomplete) }, "agent"),
	counter("pcapsync_collector_agent_captured_packets_total", "Packets the agent reports it captured (its last stats report; counts since the agent process started).",
		func(s *agentSnap) float64 { return u(s.Captured) }, "agent"),
	counter("pcapsync_collector_agent_kernel_dropped_packets_total", "Packets the agent reports its kernel dropped, all interfaces (its last stats report).",
		func(s *agentSnap) float64 { return u(s.KernelDrops) }, "agent"),
	counter("pcapsync_collector_agent_dropped_packets_total", "Packets the agent reports it dropped itself: queue or spool full, rate limit (its last stats report).",
		func(s *agentSnap) float64 { return u(s.AgentDrops) }, "agent"),
}

// Gauges that do not add up across agents: not given for OtherAgents.
var ownAgentFields = []field[agentSnap]{
	gauge("pcapsync_collector_agent_lag_batches", "Last sequence received minus last sequence acknowledged (batches written, not yet committed).",
		func(s *agentSnap) float64 { return u(s.Lag) }, "agent"),
	gauge("pcapsync_collector_agent_last_batch_timestamp_seconds", "Unix time the agent's last batch arrived (0 before any).",
		func(s *agentSnap) float64 { return unixSeconds(s.LastBatch) }, "agent"),
}

func (c *coreCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(coreFields, ch)
	describe(storeFields, ch)
	describe(fsFields, ch)
	describe(perAgentFields, ch)
	describe(ownAgentFields, ch)
	ch <- decodeErrors
	ch <- batchesRejected
	for _, d := range []*prometheus.Desc{retainDeletedFiles, retainDeletedBytes, retainShort, retainShortTotal, retainForeign, retainHolds, retainHeld, retainRootBytes, retainLimit, retainHigh, retainLow, retainOldest} {
		ch <- d
	}
}

func (c *coreCollector) Collect(ch chan<- prometheus.Metric) {
	cnt := &c.core.Counters
	agents := agentSnaps(c.core, c.udp)
	s := coreSnap{c: cnt, mem: c.core.ReadMemory()}
	st := c.core.Store() // nil for an ingest collector
	if st != nil {
		s.st, s.openFiles, s.maxOpenFiles = &st.Counters, st.OpenFiles(), st.MaxOpenFiles()
	}
	if c.udp != nil {
		uc := &c.udp.Counters
		s.udpDgrams, s.udpUnknown, s.udpBad = uc.Datagrams.Load(), uc.Unknown.Load(), uc.Malformed.Load()
		s.udpEvicted, s.udpReassemblyBytes = uc.Evicted.Load(), uc.ReassemblyBytes.Load()
	}
	for i := range agents {
		if agents[i].Connected {
			s.connected++
		}
	}
	emit(coreFields, &s, ch)
	if st != nil {
		emit(storeFields, &s, ch)
		if s.fsSize, s.fsFree, s.fsOK = statfs(c.core.Dir()); s.fsOK {
			emit(fsFields, &s, ch)
		}
	}
	for _, kv := range []struct {
		kind string
		n    uint64
	}{{"protocol", cnt.ProtocolErrors.Load()}, {"compression", cnt.BadCompress.Load()}, {"udp_malformed", s.udpBad}} {
		ch <- prometheus.MustNewConstMetric(decodeErrors, prometheus.CounterValue, u(kv.n), kv.kind)
	}
	ch <- prometheus.MustNewConstMetric(batchesRejected, prometheus.CounterValue, u(cnt.TooLarge.Load()), "frame_size")
	ch <- prometheus.MustNewConstMetric(batchesRejected, prometheus.CounterValue, u(cnt.TooLargeRaw.Load()), "decompressed_size")
	if st != nil {
		c.collectRetention(ch)
	}

	var other agentSnap
	others := 0
	for i := range agents {
		a := &agents[i]
		if c.maxAgents < 0 || i < c.maxAgents {
			emit(perAgentFields, a, ch, a.Name)
			emit(ownAgentFields, a, ch, a.Name)
			continue
		}
		others++
		other.Batches += a.Batches
		other.Packets += a.Packets
		other.Bytes += a.Bytes
		other.DiskBytes += a.DiskBytes
		other.Duplicates += a.Duplicates
		other.lost += a.lost
		other.incomplete += a.incomplete
		other.Captured += a.Captured
		other.KernelDrops += a.KernelDrops
		other.AgentDrops += a.AgentDrops
		other.connected += a.connected
	}
	if others > 0 {
		emit(perAgentFields, &other, ch, OtherAgents)
	}
}

// agentSnaps returns every agent's stats, sorted by name, with UDP
// losses added in.
func agentSnaps(core *collector.Core, udp *collector.UDPServer) []agentSnap {
	st := core.AgentStats()
	var uc map[string]collector.UDPAgentCounts
	if udp != nil {
		uc = udp.AgentCounts()
	}
	out := make([]agentSnap, len(st))
	for i, a := range st {
		out[i] = agentSnap{AgentStats: a, lost: a.MissingBatches + uc[a.Name].Lost, incomplete: uc[a.Name].Incomplete, connected: b2f(a.Connected)}
	}
	return out
}
