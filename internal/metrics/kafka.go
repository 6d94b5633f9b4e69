package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/kafkaio"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
)

// Kafka metrics of an ingest collector (its producer) and of a writer
// (its consumer). The histograms are made by NewCollector, to be given
// to kafkarec.ProducerConfig.Latency and kafkaio.WriterConfig.Delay, and
// registered by WatchProducer and WatchWriter.
func newKafkaHistograms() (produce, delay prometheus.Histogram) {
	produce = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pcapsync_kafka_produce_seconds",
		Help:    "Time from handing a batch to the Kafka producer to the brokers' acknowledgement (all in-sync replicas); the agent's acknowledgement waits for it.",
		Buckets: steps(1e-4, 10),
	})
	delay = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "pcapsync_kafka_record_delay_seconds",
		Help:    "Time from a record's timestamp (when it was produced) to the commit of its offset by this writer, its batch written and durable.",
		Buckets: steps(1e-3, 100),
	})
	return produce, delay
}

// WatchProducer registers an ingest collector's producer metrics.
func (m *Collector) WatchProducer(c *kafkarec.ProducerCounters) {
	m.Registry.MustRegister(m.Produce,
		counterFunc("pcapsync_kafka_produced_records_total", "Records (one batch or stats frame each) the brokers acknowledged.", &c.Records),
		counterFunc("pcapsync_kafka_produced_bytes_total", "Bytes of the records' values the brokers acknowledged (frames as the agents sent them).", &c.Bytes),
		counterFunc("pcapsync_kafka_produce_errors_total", "Records the brokers did not take; their batches were not acknowledged to the agent, which sends them again.", &c.Errors),
	)
}

// Consumer is what WatchWriter reads of a writer (a *kafkaio.Writer).
type Consumer interface {
	Topic() string
	Group() string
	Partitions() []kafkaio.PartitionState
}

// WatchWriter registers a writer's consumer metrics: c's counters, and
// w's partitions and lag.
func (m *Collector) WatchWriter(c *kafkaio.WriterCounters, w Consumer) {
	m.Registry.MustRegister(m.RecordDelay,
		counterFunc("pcapsync_kafka_consumed_records_total", "Records consumed.", &c.Records),
		counterFunc("pcapsync_kafka_consumed_bytes_total", "Bytes of the records' values consumed.", &c.Bytes),
		counterFunc("pcapsync_kafka_bad_records_total", "Records skipped: malformed, unauthenticated, corrupt, or refused as an agent's session would be (they stay in the topic).", &c.BadRecords),
		counterFunc("pcapsync_kafka_bad_checksum_records_total", "Batch records skipped because their batch checksum did not match: corrupted or forged (also in bad_records).", &c.BadChecksums),
		counterFunc("pcapsync_kafka_unauthenticated_records_total", "Records skipped for a missing or wrong MAC under --kafka-record-key: not produced by a holder of the key (also in bad_records).", &c.Unauthenticated),
		counterFunc("pcapsync_kafka_previous_key_records_total", "Records authenticated by the topic's previous record key (--kafka-record-key-previous): producers still on the old key. Drop the previous key once it has stayed still while the lag reached 0.", &c.PreviousKey),
		counterFunc("pcapsync_kafka_agents_released_total", "Agents the writer gave up while it kept their partition: idle, or to stay within the agents it may hold (RLIMIT_NOFILE).", &c.Released),
		counterFunc("pcapsync_kafka_rebalances_total", "Partition assignments this writer received from its group.", &c.Rebalances),
		counterFunc("pcapsync_kafka_commits_total", "Offset commits that succeeded (each after the batches before it were durable).", &c.Commits),
		counterFunc("pcapsync_kafka_consumer_restarts_total", "Times the writer left its group and started over from the committed offsets (a storage error, or an agent held by another writer too long).", &c.Restarts),
		partitionCollector{w},
	)
}

var (
	assignedPartitions = prometheus.NewDesc("pcapsync_kafka_assigned_partitions",
		"Partitions of the topic assigned to this writer now.", []string{"topic"}, nil)
	consumerLag = prometheus.NewDesc("pcapsync_kafka_consumer_lag_records",
		"Records of an assigned partition between the group's committed offset and the partition's end: not yet durable in files. Absent until known.",
		[]string{"topic", "partition"}, nil)
	consumerOffset = prometheus.NewDesc("pcapsync_kafka_consumer_committed_offset",
		"The group's committed offset of an assigned partition. Absent until known.",
		[]string{"topic", "partition"}, nil)
)

// partitionCollector reads a writer's partitions at every scrape.
type partitionCollector struct{ w Consumer }

func (c partitionCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- assignedPartitions
	ch <- consumerLag
	ch <- consumerOffset
}

func (c partitionCollector) Collect(ch chan<- prometheus.Metric) {
	topic := c.w.Topic()
	ps := c.w.Partitions()
	ch <- prometheus.MustNewConstMetric(assignedPartitions, prometheus.GaugeValue, float64(len(ps)), topic)
	for _, p := range ps {
		part := strconv.Itoa(int(p.Partition))
		if p.Lag >= 0 {
			ch <- prometheus.MustNewConstMetric(consumerLag, prometheus.GaugeValue, float64(p.Lag), topic, part)
		}
		if p.Committed >= 0 {
			ch <- prometheus.MustNewConstMetric(consumerOffset, prometheus.GaugeValue, float64(p.Committed), topic, part)
		}
	}
}
