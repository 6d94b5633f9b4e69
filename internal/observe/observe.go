// Package observe holds the one-method interface through which the
// agent, the collector and the store report latencies without importing
// a metrics library: a prometheus.Histogram satisfies it.
package observe

// Observer takes one observation, such as a latency in seconds. Where a
// Config takes one, its doc comment says from which goroutines and
// under which locks Observe is called.
type Observer interface{ Observe(float64) }
