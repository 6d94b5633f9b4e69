//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// scrapeMetrics fetches http://addr/metrics (on loopback) and parses it.
func scrapeMetrics(t *testing.T, addr string) metricstest.Families {
	t.Helper()
	fams, err := fetchMetrics("", addr)
	if err != nil {
		t.Fatalf("scraping %s: %v", addr, err)
	}
	return fams
}

// metricsAddr waits until p serves its metrics (started with --metrics
// on a port of freeport's) and returns their address.
func metricsAddr(t *testing.T, p *proc) string {
	t.Helper()
	p.waitReady(30 * time.Second)
	return p.metrics
}

// sumSamples adds up every sample of a counter or gauge family.
func sumSamples(f metricstest.Families, name string) float64 {
	var sum float64
	for _, m := range f[name].GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum
}

// checkKafkaMetrics checks, once the group has caught up, what the
// ingest collectors and the writers export: the records the brokers
// acknowledged to the ingest collectors were all consumed (a record
// consumed again after a rebalance counts again), the writers together
// hold every partition of the topic with no lag, and `pcapsync status`
// on each writer shows its partitions.
func checkKafkaMetrics(t *testing.T, k *kafkaPipeline, ingest, writers []string, partitions int) {
	t.Helper()
	var produced, consumed, assigned, delays float64
	for _, addr := range ingest {
		m := scrapeMetrics(t, addr)
		produced += m.Value(t, "pcapsync_kafka_produced_records_total")
		if e := m.Value(t, "pcapsync_kafka_produce_errors_total"); e != 0 {
			t.Errorf("ingest %s: %v produce errors", addr, e)
		}
		if n := m.Value(t, "pcapsync_kafka_produce_seconds"); n == 0 {
			t.Errorf("ingest %s: no produce latency observed", addr)
		}
	}
	// The offsets are listed at an assignment and every 5 s: wait for
	// listings that know every partition's lag and see the end the
	// group committed, with every partition held (all writers scraped
	// together: one scraped in a rebalance holds none for a moment).
	ms := make([]metricstest.Families, len(writers))
	ns := make([]float64, len(writers))
	testutil.Eventually(t, 3*5*time.Second, func() error {
		assigned = 0
		for i, addr := range writers {
			ms[i] = scrapeMetrics(t, addr)
			ns[i] = ms[i].Value(t, "pcapsync_kafka_assigned_partitions", "topic="+k.topic)
			if got := len(ms[i]["pcapsync_kafka_consumer_lag_records"].GetMetric()); got != int(ns[i]) {
				return fmt.Errorf("writer %s: %d partitions with a known lag, %v assigned", addr, got, ns[i])
			}
			if lag := sumSamples(ms[i], "pcapsync_kafka_consumer_lag_records"); lag != 0 {
				return fmt.Errorf("writer %s: lag %v records after the group caught up", addr, lag)
			}
			assigned += ns[i]
		}
		if assigned != float64(partitions) {
			return fmt.Errorf("the writers hold %v partitions, the topic has %d", assigned, partitions)
		}
		return nil
	})
	for i, addr := range writers {
		consumed += ms[i].Value(t, "pcapsync_kafka_consumed_records_total")
		delays += ms[i].Value(t, "pcapsync_kafka_record_delay_seconds")
		checkWriterStatus(t, k, addr, int(ns[i]))
	}
	if produced == 0 || consumed < produced {
		t.Errorf("%v records produced by the ingest collectors, %v consumed by the writers", produced, consumed)
	}
	if delays < produced {
		t.Errorf("%v record delays observed, %v records produced", delays, produced)
	}
}

// checkWriterStatus runs `pcapsync status` on a writer's metrics
// address, as JSON and as a table.
func checkWriterStatus(t *testing.T, k *kafkaPipeline, addr string, assigned int) {
	t.Helper()
	js := startProc(t, k.ctx, "status --json "+addr, "", "status", "--collector-admin", addr, "--json")
	if code := js.wait(10 * time.Second); code != 0 {
		t.Fatalf("pcapsync status --json %s exited with %d", addr, code)
	}
	var st metrics.Status
	if err := json.Unmarshal([]byte(js.stdout.String()), &st); err != nil {
		t.Fatalf("decoding pcapsync status --json: %v\n%s", err, js.stdout.String())
	}
	if st.Kafka == nil || st.Kafka.Topic != k.topic || st.Kafka.Group != k.group ||
		len(st.Kafka.Partitions) != assigned || st.Kafka.Lag != 0 {
		t.Errorf("status of writer %s: kafka %+v; want topic %s, group %s, %d partitions, lag 0", addr, st.Kafka, k.topic, k.group, assigned)
	}
	tab := startProc(t, k.ctx, "status "+addr, "", "status", "--collector-admin", addr)
	if code := tab.wait(10 * time.Second); code != 0 {
		t.Fatalf("pcapsync status %s exited with %d", addr, code)
	}
	want := fmt.Sprintf(`(?m)^kafka topic %s, group %s: %d partitions assigned, lag 0 records$`, k.topic, k.group, assigned)
	if !regexp.MustCompile(want).MatchString(tab.stdout.String()) {
		t.Errorf("status table of writer %s does not match %s:\n%s", addr, want, tab.stdout.String())
	}
}
