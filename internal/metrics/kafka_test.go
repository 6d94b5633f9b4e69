package metrics

import (
	"regexp"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/kafkaio"
	"github.com/pcapsync/pcapsync/internal/kafkarec"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
)

// consumerStub is a writer's partitions as a test sets them.
type consumerStub []kafkaio.PartitionState

func (consumerStub) Group() string                          { return "writers" }
func (consumerStub) Topic() string                          { return "pcap" }
func (c consumerStub) Partitions() []kafkaio.PartitionState { return c }

// TestKafkaMetrics: the producer's and the writer's counters are
// exported as they are at the scrape; each assigned partition has its
// lag and committed offset once known, and none before.
func TestKafkaMetrics(t *testing.T) {
	m := NewCollector(0)
	var pc kafkarec.ProducerCounters
	var wc kafkaio.WriterCounters
	m.WatchProducer(&pc)
	parts := consumerStub{
		{Partition: 0, Offset: 120, Committed: 100, End: 130, Lag: 30},
		{Partition: 7, Offset: -1, Committed: -1, End: -1, Lag: -1}, // assigned, nothing known yet
	}
	m.WatchWriter(&wc, parts)
	pc.Records.Store(10)
	pc.Bytes.Store(10 << 20)
	pc.Errors.Store(2)
	wc.Records.Store(9)
	wc.Bytes.Store(9 << 20)
	wc.BadRecords.Store(1)
	wc.BadChecksums.Store(6)
	wc.Unauthenticated.Store(7)
	wc.PreviousKey.Store(11)
	wc.Released.Store(8)
	wc.Rebalances.Store(3)
	wc.Commits.Store(4)
	wc.Restarts.Store(5)
	m.Produce.Observe(0.004)
	m.RecordDelay.Observe(0.2)
	m.RecordDelay.Observe(0.3)
	got := metricstest.Gather(t, m.Registry)
	got.Expect(t, "kafka", []metricstest.Want{
		{Name: "pcapsync_kafka_produced_records_total", Value: 10},
		{Name: "pcapsync_kafka_produced_bytes_total", Value: 10 << 20},
		{Name: "pcapsync_kafka_produce_errors_total", Value: 2},
		{Name: "pcapsync_kafka_consumed_records_total", Value: 9},
		{Name: "pcapsync_kafka_consumed_bytes_total", Value: 9 << 20},
		{Name: "pcapsync_kafka_bad_records_total", Value: 1},
		{Name: "pcapsync_kafka_bad_checksum_records_total", Value: 6},
		{Name: "pcapsync_kafka_unauthenticated_records_total", Value: 7},
		{Name: "pcapsync_kafka_previous_key_records_total", Value: 11},
		{Name: "pcapsync_kafka_agents_released_total", Value: 8},
		{Name: "pcapsync_kafka_rebalances_total", Value: 3},
		{Name: "pcapsync_kafka_commits_total", Value: 4},
		{Name: "pcapsync_kafka_consumer_restarts_total", Value: 5},
		{Name: "pcapsync_kafka_produce_seconds", Value: 1},      // samples
		{Name: "pcapsync_kafka_record_delay_seconds", Value: 2}, // samples
		{Name: "pcapsync_kafka_assigned_partitions", Labels: []string{"topic=pcap"}, Value: 2},
		{Name: "pcapsync_kafka_consumer_lag_records", Labels: []string{"topic=pcap", "partition=0"}, Value: 30},
		{Name: "pcapsync_kafka_consumer_committed_offset", Labels: []string{"topic=pcap", "partition=0"}, Value: 100},
	})
	for _, name := range []string{"pcapsync_kafka_consumer_lag_records", "pcapsync_kafka_consumer_committed_offset"} {
		if _, err := got.Lookup(name, "partition=7"); err == nil {
			t.Errorf("%s of a partition whose offsets are not known yet: exported, want absent", name)
		}
	}
}

// TestKafkaStatus: a writer's status lists the partitions it holds, the
// unknown offsets as -1 (JSON) and "-" (table), and sums the known lags.
func TestKafkaStatus(t *testing.T) {
	ks := kafkaStatus(consumerStub{
		{Partition: 0, Committed: 100, End: 130, Lag: 30},
		{Partition: 7, Committed: -1, End: -1, Lag: -1},
		{Partition: 9, Committed: 5, End: 17, Lag: 12},
	})
	if ks.Topic != "pcap" || ks.Group != "writers" || ks.Lag != 42 || len(ks.Partitions) != 3 || ks.Partitions[1].End != -1 {
		t.Fatalf("kafka status %+v", ks)
	}
	var out strings.Builder
	if err := WriteTable(&out, Status{Kafka: ks}); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^kafka topic pcap, group writers: 3 partitions assigned, lag 42 records$`,
		`(?m)^PARTITION +COMMITTED +END +LAG$`,
		`(?m)^0 +100 +130 +30$`,
		`(?m)^7 +- +- +-$`,
		`(?m)^9 +5 +17 +12$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("table does not match %s:\n%s", re, out.String())
		}
	}
}
