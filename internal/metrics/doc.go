// Package metrics is pcapsync's metrics surface: a Prometheus registry
// per process (never the global one) whose collectors read the agent's
// and the collector's own counters at scrape time (agent.Agent.Stats,
// collector.Core.AgentStats and Counters), so nothing is counted twice
// and nothing is done per packet; the only observations on the hot
// path are the latency histograms, once per batch or per fsync. The
// agent and collector packages know nothing of Prometheus: they take a
// one-method Observer for their histograms.
//
// Handler serves a registry at /metrics, the collector's status page
// at /status (Status, a JSON list of agents; WriteTable prints it for
// "pcapsync status"), and net/http/pprof at /debug/pprof/ when asked.
// It has no authentication: bind it to loopback or protect it.
//
// Every metric is listed, with its type, labels and meaning, in
// docs/metrics.md.
package metrics
