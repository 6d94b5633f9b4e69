// Package bench measures pcapsync's transport and collector on this
// machine, in one process, over loopback only: the figures behind
// "pcapsync bench" and BENCHMARKS.md (issue 4).
//
// Transport compares one 85-byte message per frame against many per
// frame, over TCP and UDP, using the wire package's batch frames.
// Fanin runs one in-process collector (Core and Server) against
// thousands of simulated agents that speak the real protocol, and
// reports whether every packet was written, acknowledgement latency,
// CPU and peak RSS.
//
// Everything here is for measuring: it is not used by the agent or the
// collector.
package bench
