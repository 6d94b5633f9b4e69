// Package flowquery selects flow records (internal/flow) from an output
// root, as internal/query selects packets: pcapsync flows, GET /flows and
// the blocks query --community-id reads. docs/flows.md is the user's
// description; this is the contract for code.
//
// # Selection
//
// Agents by name or glob (their directories), interfaces by glob over the
// names the data files give them ("web1:eth0"; a pattern without ':'
// matches the interface part), a time range [Since, Until): a flow is
// selected when its first..last packet times overlap it, and a filter in
// tcpdump syntax on the flow's key (Filter).
//
// # Filter
//
// The filter runs, compiled by libpcap for Ethernet (internal/filter), on
// one synthetic packet per flow built from its key, sent by the initiator
// to the responder: Ethernet (the flow's MACs for traffic that is not IP),
// its VLAN tags (802.1Q), the IPv4 or IPv6 header with its protocol and
// addresses, and a TCP, UDP or SCTP header with its ports or an ICMP or
// ICMPv6 header with its type (and code). So "host X", "net N", "port P",
// "proto", "vlan V", "ip6", "arp" and the rest mean what they mean on the
// flow's packets, "src host X" selects flows X initiated and "dst port P"
// flows to P (the responder's port), as in Zeek's conn.log. Primitives on
// what the key does not hold (TCP flags, lengths, payload bytes) see the
// synthetic headers: flags zero, no payload. As on packets, a primitive
// without "vlan" does not look past VLAN tags (libpcap's rule): "vlan and
// host X" selects the tagged flows of X.
//
// # Joining
//
// A flow is written as one record per data file and per split (Part 0,
// 1, ...; the same key). Records of one agent are joined, file by file in
// the order the store wrote them, when a record ending open (EndOpen) or
// split (EndSplit) is followed by a record of the same key with the next
// Part: the joined flow has the earliest first and the latest last time,
// the sums of the counts, the flags OR-ed, the last part's end, and the
// runs of blocks of each part with its data file (Flow.Parts). Flows of
// different agents are never joined: Group gathers them by Community ID.
//
// # Files
//
// A data file's flow file (flow.Path) is opened with internal/safefs (never
// a link, FIFO or device), read up to maxFlowFile bytes and parsed by
// flow.Parse, which verifies every record. A flow file that does not
// verify is reported (Result.Damaged, and the logger) and skipped whole;
// one of a data file still being written (.part) is read up to its last
// record that verifies. A closed data file without a flow file (written
// with --flows=false, or before flow records) is counted
// (Result.Missing): its flows are not known (pcapsync index gives it
// one); a data file being written is counted in Result.Writing. Interface names are read from the data file's
// interface descriptions, as far into it as the records' interfaces need.
//
// # Reading
//
// Per agent, file after file: the flow file is read into one buffer
// (reused for every file), verified in a first pass (a closed file's
// records are all taken or none) that also finds the interfaces named,
// then decoded again into one reused flow.Record and joined. Only the
// flows whose last record ended open or split wait in a map (keyed by
// the key and the interface's name) for their next part; a flow that
// ended is handed on at once.
//
// # Memory
//
// Run holds every selected flow, joined and sorted before it is
// returned: Config.MaxFlows bounds them (ErrTooManyFlows past it),
// about 400 bytes each. RunTop (pcapsync flows --top) holds only the
// flows waiting for their next part and one entry per group (about 100
// bytes: a compact key and three sums), named only when the groups are
// ranked, and only those that may rank among the n largest: MaxFlows
// bounds the two together. Top over a []Flow sums the same way.
package flowquery
