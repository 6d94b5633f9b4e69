// Package bench measures pcapsync on this machine against the tools it
// replaces: the figures behind "pcapsync bench" and BENCHMARKS.md
// (issue 4).
//
// Transport compares one 85-byte message per frame against many per
// frame, over TCP and UDP, using the wire package's batch frames.
// Fanin runs one in-process collector (Core and Server) against
// thousands of simulated agents that speak the real protocol, and
// reports whether every packet was written, acknowledgement latency,
// CPU and peak RSS.
//
// The others run real processes (the pcapsync binary, tcpdump, nc,
// rsync), each its own exec.Cmd whose CPU comes from wait4 and whose
// peak RSS is sampled from /proc (procSet). Pipeline replays a file
// through agent and collector, PCAP-over-IP and tcpdump -w + rsync.
// Latency and Live run in two network namespaces joined by a veth
// (vethPair), as root: Latency measures capture-to-file time against
// tcpdump -U -w, Live captured packets, drops and CPU against
// tcpdump -w at the highest rate the machine sends.
//
// Kafka and KafkaScale run the Kafka path (issue 15) the same way,
// against a broker they start from scripts/kafka.sh's jars through
// kafkatest (benchTB stands in for the test) or one they are given:
// Kafka against the direct path and Kafka's ProducerPerformance, the
// broker's CPU read from /proc/PID/stat, and the latency of both paths
// capturing lo; KafkaScale with 1, 2 and 3 writers of one group.
//
// Query (issue 16) writes an output root of many agents' captures
// through the store, as the collector does, and runs pcapsync query
// (with and without the indexes) against mergecap piped into tcpdump
// (and editcap -A/-B for a time range), each side's bytes read taken
// from /proc/PID/io once its process has exited, before it is reaped.
//
// Everything here is for measuring: it is not used by the agent or the
// collector.
package bench
