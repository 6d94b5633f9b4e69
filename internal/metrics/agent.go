package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/agent"
)

// Agent is an agent process's metrics: create it before agent.New, give
// AckLatency to agent.Config.AckLatency, then Watch the agent.
type Agent struct {
	Registry   *prometheus.Registry
	AckLatency prometheus.Histogram
}

// NewAgent returns an agent's registry, holding the Go and process
// collectors and the acknowledgement latency histogram so far.
func NewAgent() *Agent {
	m := &Agent{Registry: newRegistry(), AckLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "pcapsync_agent_ack_latency_seconds",
		Help: "Time from a batch's first write to the collector to its acknowledgement (TCP).",
		// A loopback ack to a collector outage.
		Buckets: steps(1e-4, 30),
	})}
	m.Registry.MustRegister(m.AckLatency)
	return m
}

// Watch registers the collector that reads a's counters at every scrape.
func (m *Agent) Watch(a *agent.Agent) { m.Registry.MustRegister(agentCollector{a}) }

type agentCollector struct{ a *agent.Agent }

// Agent drop reasons (label "reason").
const (
	ReasonQueueFull = "queue_full" // the queue (or spool) was full
	ReasonRateLimit = "rate_limit" // over --max-rate
)

var agentFields = []field[agent.Stats]{
	counter("pcapsync_agent_sent_packets_total", "Packets sent to the collector at least once.",
		func(s *agent.Stats) float64 { return u(s.Sent) }),
	counter("pcapsync_agent_acknowledged_packets_total", "Packets of this run the collector acknowledged (TCP; 0 over UDP); not those recovered from a previous run's spool.",
		func(s *agent.Stats) float64 { return u(s.Acked) }),
	counter("pcapsync_agent_recovered_packets_total", "Packets of the batches a previous run left in the spool, loaded by this run (sent again unless the collector holds them).",
		func(s *agent.Stats) float64 { return u(s.Recovered) }),
	counter("pcapsync_agent_sent_batches_total", "Batches written to the collector for the first time (TCP) or sent in a datagram (UDP).",
		func(s *agent.Stats) float64 { return u(s.BatchesSent) }),
	counter("pcapsync_agent_acknowledged_batches_total", "Batches the collector acknowledged (TCP).",
		func(s *agent.Stats) float64 { return u(s.BatchesAcked) }),
	counter("pcapsync_agent_resent_batches_total", "Batches written again after a reconnect (the collector drops those it holds as duplicates).",
		func(s *agent.Stats) float64 { return u(s.BatchesResent) }),
	gauge("pcapsync_agent_unacknowledged_batches", "Batches queued (memory and spool) and not acknowledged yet.",
		func(s *agent.Stats) float64 { return float64(s.UnackedBatches) }),
	gauge("pcapsync_agent_unacknowledged_bytes", "Bytes of the frames of the unacknowledged batches.",
		func(s *agent.Stats) float64 { return float64(s.UnackedBytes) }),
	gauge("pcapsync_agent_unacknowledged_packets", "Packets of the unacknowledged batches: sealed into a batch (memory or spool) or recovered from the spool, not acknowledged yet.",
		func(s *agent.Stats) float64 { return u(s.Unacked) }),
	counter("pcapsync_agent_sealed_packets_total", "Packets this run sealed into batches (memory or spool); not those recovered from a previous run's spool.",
		func(s *agent.Stats) float64 { return u(s.SealedPackets) }),
	counter("pcapsync_agent_reconnects_total", "Connections to the collector made again after the first.",
		func(s *agent.Stats) float64 { return u(s.Reconnects) }),
	counter("pcapsync_agent_failovers_total", "Moves to the next collector of --collector's list after the current one could not be reached or its connection was lost.",
		func(s *agent.Stats) float64 { return u(s.Failovers) }),
	gauge("pcapsync_agent_connected", "1 while a TCP session with the collector is up.",
		func(s *agent.Stats) float64 { return b2f(s.Connected) }),
	counter("pcapsync_agent_compression_input_bytes_total", "Bytes of batch records before compression (equal to the output without --compress).",
		func(s *agent.Stats) float64 { return u(s.RawBytes) }),
	counter("pcapsync_agent_compression_output_bytes_total", "Bytes of batch records as sent, after compression.",
		func(s *agent.Stats) float64 { return u(s.WireBytes) }),
	gauge("pcapsync_agent_compression_ratio", "Input over output bytes of batch records since start (1 without compression, 0 before the first batch).",
		func(s *agent.Stats) float64 {
			if s.WireBytes == 0 {
				return 0
			}
			return float64(s.RawBytes) / float64(s.WireBytes)
		}),
	counter("pcapsync_agent_truncated_packets_total", "Packets cut to the longest captured length readers accept for their link type (file replay), original length kept.",
		func(s *agent.Stats) float64 { return u(s.LinkTruncated) }),
	counter("pcapsync_agent_udp_datagrams_total", "Datagrams sent (UDP transport).",
		func(s *agent.Stats) float64 { return u(s.Datagrams) }),
	counter("pcapsync_agent_udp_send_errors_total", "Datagrams the kernel refused (UDP transport): their batches are lost.",
		func(s *agent.Stats) float64 { return u(s.SendErrors) }),
	counter("pcapsync_agent_udp_pieced_batches_total", "Batches larger than a datagram (a packet too big for one), sent in pieces (UDP transport).",
		func(s *agent.Stats) float64 { return u(s.Pieced) }),
	counter("pcapsync_agent_udp_pieces_total", "Datagrams that carried those pieces (UDP transport; also counted in pcapsync_agent_udp_datagrams_total).",
		func(s *agent.Stats) float64 { return u(s.Pieces) }),
}

var agentDrops = prometheus.NewDesc("pcapsync_agent_dropped_packets_total",
	"Packets the agent dropped, by reason: queue_full (queue or spool full), rate_limit (over --max-rate).", []string{"reason"}, nil)

var ifaceFields = []field[agent.IfaceStats]{
	counter("pcapsync_agent_captured_packets_total", "Packets read from the interface's ring (or the replayed file), rate-limited ones included.",
		func(s *agent.IfaceStats) float64 { return u(s.Captured) }, "interface"),
	counter("pcapsync_agent_captured_bytes_total", "Bytes of the packets read, as captured (up to the snaplen).",
		func(s *agent.IfaceStats) float64 { return u(s.Bytes) }, "interface"),
	counter("pcapsync_agent_kernel_dropped_packets_total", "Packets the kernel dropped because the ring was full.",
		func(s *agent.IfaceStats) float64 { return u(s.KernelDrops) }, "interface"),
	counter("pcapsync_agent_kernel_queue_freezes_total", "Times the kernel found the ring full and stopped filling it until a block was freed.",
		func(s *agent.IfaceStats) float64 { return u(s.QueueFreezes) }, "interface"),
}

func (c agentCollector) Describe(ch chan<- *prometheus.Desc) {
	describe(agentFields, ch)
	describe(ifaceFields, ch)
	ch <- agentDrops
}

func (c agentCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.a.Stats()
	emit(agentFields, &s, ch)
	ch <- prometheus.MustNewConstMetric(agentDrops, prometheus.CounterValue, u(s.Dropped), ReasonQueueFull)
	ch <- prometheus.MustNewConstMetric(agentDrops, prometheus.CounterValue, u(s.RateDrops), ReasonRateLimit)
	for i := range s.Interfaces {
		emit(ifaceFields, &s.Interfaces[i], ch, s.Interfaces[i].Name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
