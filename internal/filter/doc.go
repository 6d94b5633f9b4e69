// Package filter runs tcpdump expressions (pcap-filter(7)) on packets
// of any link type in user space, as tcpdump -r runs them: libpcap
// compiles (internal/capture), this package's classic-BPF interpreter
// runs (bpf.go). The tap, the Redis copy and the query share it; it
// depends on nothing of the ingest or read paths.
package filter
