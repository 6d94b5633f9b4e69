// Package flow turns packets into flow records (conversations): who
// talked to whom, how much, when, how it ended, and where in a data file
// its packets are. docs/flows.md is the user's description; this is the
// contract for code.
//
// # Keys
//
// Decode reads the key of one packet from its captured bytes: the
// interface, up to two VLAN ids, the ethertype, and for IP the addresses,
// the protocol (after IPv6 extension headers) and the ports (TCP, UDP,
// SCTP) or ICMP and ICMPv6 port equivalents (the type and its
// counterpart's type, or type and code for messages without one,
// FlagOneWay), as Community ID and Zeek take them. Traffic that is not IP
// is keyed by its ethertype and MAC pair. A packet cut short is keyed by
// what was captured (FlagCut); a later IP fragment by its addresses and
// protocol (FlagFragment). Decode never panics and does not allocate.
//
// Key.CommunityID is the Community ID v1 of a key, with any seed.
//
// # Table
//
// A Table takes every packet of a data file (Add, or AddKey for a packet
// already decoded) and keeps one entry per flow, found by the key with
// the smaller endpoint first. The initiator is the first packet's sender
// unless a TCP SYN (without ACK) says otherwise: a SYN's sender, a
// SYN-ACK's receiver. A flow's record ends at FIN both ways or RST (after
// ClosedTimeout, so that the last ACK counts), after IdleTimeout without
// packets, every SplitPackets packets (the flow goes on in its next Part),
// at Rotate (the data file closes; the flow goes on in the next file) and
// Flush, or when a new flow finds MaxFlows held (the least recently
// active ends, EndEvicted, counted). Time is the packets' (the latest
// seen), or a clock through Expire. Ended records accumulate in Records
// until Clear: the caller encodes and appends them.
//
// Add allocates nothing for a packet of a flow the table holds
// (TestAddAllocs); a new flow may grow the table, up to MaxFlows entries
// of about 300 bytes. A Table is not safe for concurrent use.
//
// # Files
//
// A flow file (format.go: Encoder, Decoder, Parse) holds the records of
// one data file: a header naming it, records appended as flows end, each
// with a CRC-32C chained to the one before, and an end record when the
// data file closes. The Decoder treats the bytes as hostile: every length
// is checked against what is left before it is used, every field against
// its range, and records are returned only once their checksum verifies.
// Decoder and Parse keep no reference to the bytes in the records they
// return.
package flow
