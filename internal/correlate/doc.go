// Package correlate answers "where was it lost?": for the same time
// range and filter on two or more agents (capture points), it matches
// each packet seen at one with the same packet at the others and
// reports, per pair, what was seen at one and never at the other, the
// duplicates and the one-way delay: pcapsync correlate.
//
// # Reading
//
// One query (internal/query) over the agents' files gives their
// packets merged in timestamp order, each on an interface named
// "agent:iface"; the query's selection (interfaces, range, filter) and
// its guarantees (exact range, files being written read to their last
// complete batch, a file removed by retention an error) are
// correlate's.
//
// # Matching
//
// A packet is known by its Key: the bytes that do not change on the way
// (addresses, protocol, IPv4 identification, fragment offset, ports,
// TCP sequence and acknowledgement numbers, ICMP identifier and
// sequence, the L4 payload's length and a hash of it), not TTL, DSCP,
// ECN, checksums or the link-layer header. For each pair of agents
// (From, To: the order of Config.Agents), the occurrences of a key at
// the two are matched in order, first with first, as long as they are
// at most Config.Window apart on the agents' clocks. When a packet
// leaves the window unmatched in a pair it is counted seen at its agent
// and never at the other, or, when another occurrence of its key was
// matched in that pair, a duplicate (a retransmission, or a copy made
// on the way). A matched pair of occurrences gives a delay, tTo - tFrom,
// which includes the offset between the two agents' clocks and so can
// be negative; the distribution (min, p50, p90, p99, max) is kept in a
// fixed-size log-linear histogram, the quantiles within 0.8%.
//
// Packets within a delay of the range's ends may have their twin just
// outside it and count as unmatched: choose a range that begins and
// ends in quiet, or read it whole.
//
// # Memory
//
// The query's (Config.ReorderMem and a reader per agent) plus the
// packets of the last Window, 300 to 500 bytes each and, when the
// unmatched packets are written, their captured bytes. Nothing
// grows with the length of the range.
//
// Run is safe to call concurrently; a correlation is two goroutines
// (the query and the matcher) joined by a pipe.
package correlate
