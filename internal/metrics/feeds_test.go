package metrics

import (
	"testing"

	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// TestFeedCounters: the tap's and the Redis feed's counters are exported
// as they are at the scrape.
func TestFeedCounters(t *testing.T) {
	m := NewCollector(0)
	var tc tap.Counters
	var rc redisfeed.Counters
	m.WatchTap(&tc)
	m.WatchRedis(&rc)
	tc.Connected.Store(2)
	tc.Clients.Store(5)
	tc.DroppedSlow.Store(1)
	tc.Packets.Store(1000)
	rc.Published.Store(40)
	rc.Dropped.Store(3)
	rc.SentBytes.Store(123456)
	got := metricstest.Gather(t, m.Registry)
	want := map[string]float64{
		"pcapsync_tap_clients": 2, "pcapsync_tap_clients_total": 5, "pcapsync_tap_clients_dropped_total": 1,
		"pcapsync_tap_packets_total": 1000, "pcapsync_redis_batches_published_total": 40,
		"pcapsync_redis_batches_dropped_total": 3, "pcapsync_redis_stored_bytes_total": 123456,
	}
	for name, v := range want {
		if n := got.Value(t, name); n != v {
			t.Errorf("%s = %v, want %v", name, n, v)
		}
	}
}
