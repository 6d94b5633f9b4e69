package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/queryhttp"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/tap"
)

// WatchTap registers the live tap's counters (collector --tap).
func (m *Collector) WatchTap(c *tap.Counters) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pcapsync_tap_clients",
			Help: "Tap clients being served now."},
			func() float64 { return float64(c.Connected.Load()) }),
		counterFunc("pcapsync_tap_clients_total", "Tap clients served since start.", &c.Clients),
		counterFunc("pcapsync_tap_clients_rejected_total", "Tap clients refused: TLS, request line, token, filter, too many clients.", &c.Rejected),
		counterFunc("pcapsync_tap_clients_dropped_total", "Tap clients cut off as too slow (queue full, or nothing taken for the write timeout).", &c.DroppedSlow),
		counterFunc("pcapsync_tap_packets_total", "Packets sent to tap clients.", &c.Packets),
		counterFunc("pcapsync_tap_sent_bytes_total", "pcapng bytes sent to tap clients, headers included.", &c.Bytes),
	)
}

// WatchRedis registers the Redis live feed's counters (collector --redis).
func (m *Collector) WatchRedis(c *redisfeed.Counters) {
	m.Registry.MustRegister(
		counterFunc("pcapsync_redis_batches_published_total", "Batches added to a Redis stream.", &c.Published),
		counterFunc("pcapsync_redis_batches_dropped_total", "Batches the Redis feed dropped: its queue full, Redis down, slow or refusing.", &c.Dropped),
		counterFunc("pcapsync_redis_reconnects_total", "Times Redis came back after being down.", &c.Reconnects),
		counterFunc("pcapsync_redis_records_bytes_total", "Records bytes published, uncompressed.", &c.RawBytes),
		counterFunc("pcapsync_redis_stored_bytes_total", "Records bytes published, as stored in Redis (compressed).", &c.SentBytes),
	)
}

func counterFunc(name, help string, v *atomic.Uint64) prometheus.CounterFunc {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
		func() float64 { return float64(v.Load()) })
}

// WatchListener registers the connection counters of the listener name
// ("agents", "tap", "query", "metrics") bound to addr on reg.
func WatchListener(reg *prometheus.Registry, name, addr string, c *frontdoor.Counters) {
	l := prometheus.Labels{"listener": name, "addr": addr}
	counter := func(n, help string, v *atomic.Uint64, extra ...string) prometheus.CounterFunc {
		labels := prometheus.Labels{"listener": name, "addr": addr}
		if len(extra) == 2 {
			labels[extra[0]] = extra[1]
		}
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: n, Help: help, ConstLabels: labels},
			func() float64 { return float64(v.Load()) })
	}
	const refusedHelp = "Connections closed as soon as accepted, by the cap they were over: max_conns (the listener's), max_conns_per_source (one address's)."
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pcapsync_listener_connections", ConstLabels: l,
			Help: "Connections open now, handshakes and idle ones included."},
			func() float64 { return float64(c.Open.Load()) }),
		counter("pcapsync_listener_accepted_total", "Connections accepted within the caps.", &c.Accepted),
		counter("pcapsync_listener_refused_total", refusedHelp, &c.OverLimit, "cap", "max_conns"),
		counter("pcapsync_listener_refused_total", refusedHelp, &c.OverSource, "cap", "max_conns_per_source"),
		counter("pcapsync_listener_accept_errors_total", "Accepts that failed for lack of descriptors or memory (each followed by a pause).", &c.AcceptErrors),
	)
}

// WatchQuery registers the query listener's counters (--query-listen).
func (m *Collector) WatchQuery(c *queryhttp.Counters) {
	for _, r := range c.Results() {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pcapsync_query_requests_total",
			Help:        "Query requests by result: ok, failed, canceled (the client went away), bad_request, unauthorized, forbidden, busy (too many queries), tls (handshake failed).",
			ConstLabels: prometheus.Labels{"result": r.Name}},
			func() float64 { return float64(r.N.Load()) }))
	}
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pcapsync_query_active",
			Help: "Queries running now."},
			func() float64 { return float64(c.Active.Load()) }),
		counterFunc("pcapsync_query_packets_total", "Packets sent to query clients.", &c.Packets),
		counterFunc("pcapsync_query_sent_bytes_total", "pcapng bytes sent to query clients.", &c.Bytes),
	)
}
