package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// A field is one metric read from a snapshot S at scrape time, with
// optional labels whose values come with the snapshot.
type field[S any] struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
	val  func(*S) float64
}

func counter[S any](name, help string, val func(*S) float64, labels ...string) field[S] {
	return field[S]{prometheus.NewDesc(name, help, labels, nil), prometheus.CounterValue, val}
}

func gauge[S any](name, help string, val func(*S) float64, labels ...string) field[S] {
	return field[S]{prometheus.NewDesc(name, help, labels, nil), prometheus.GaugeValue, val}
}

func describe[S any](fs []field[S], ch chan<- *prometheus.Desc) {
	for _, f := range fs {
		ch <- f.desc
	}
}

// emit sends every field of s, with labelValues.
func emit[S any](fs []field[S], s *S, ch chan<- prometheus.Metric, labelValues ...string) {
	for _, f := range fs {
		ch <- prometheus.MustNewConstMetric(f.desc, f.typ, f.val(s), labelValues...)
	}
}

// newRegistry returns a registry with the Go runtime and process
// collectors, the usual go_* and process_* metrics.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

func u(v uint64) float64 { return float64(v) }

func unixSeconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

// steps returns histogram buckets 1, 2.5 and 5 times every power of ten
// from lo up to hi (both powers of ten, or hi any bound): 1e-4, 2.5e-4,
// 5e-4, 1e-3, ... Round numbers read better on a dashboard than
// exponential ones.
func steps(lo, hi float64) []float64 {
	var b []float64
	for p := lo; p <= hi*1.0001; p *= 10 {
		for _, m := range []float64{1, 2.5, 5} {
			if v := p * m; v <= hi*1.0001 {
				b = append(b, roundSig(v))
			}
		}
	}
	return b
}

// roundSig removes the float noise of repeated multiplication.
func roundSig(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return f
}
