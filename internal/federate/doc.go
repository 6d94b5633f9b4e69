// Package federate runs one query on many query listeners at once (the
// collectors and writers serving --query-listen, each over its own
// output root) and merges their pcapng answers into one pcapng, in
// timestamp order, as the local query merges agents: packets of equal
// timestamps in the order of their agents' names (the part of the
// interface name before ':'), then in the order of the servers, and
// each server's own order kept. It is the read side's: it imports
// internal/queryhttp (the client), internal/query (the Result each
// server sends) and internal/pcapfile, nothing of the ingest side.
//
// # Output
//
// One Section Header Block, its comment naming the federated query and
// the servers, with each server's own section comments prefixed with
// the server (and which servers failed before the output began, when
// Partial). One interface per server and interface of that server: the
// name stays the server's ("web1:eth0"), the description names the
// server ("server b:7780"), so one agent on two servers stays two
// interfaces. Each server's statistics blocks follow the packets, their
// interfaces mapped, in time order. A server that failed once the
// output began (Partial) is named in a comment of the next packet
// written ("cut here: ..."), and gets one statistics block on each of
// its interfaces, at the end, whose comment says the server's packets
// were cut there and why.
//
// # Deadline
//
// Each server has Config.Timeout: a server that sends nothing (no
// answer, no byte) for that long while the merge waits on it is timed
// out. It is a stall deadline, not a bound on the query: a long export
// that keeps sending is never cut. Connecting is bounded by it too.
//
// # Memory
//
// Each server's stream is already in timestamp order (the server
// merged its agents), so the merge holds one packet per server: the
// packet at the head of each server's pcapfile.Reader, in that
// Reader's buffer (256 KiB, grown to at most MaxPacket+BlockSlack,
// about 1.1 MiB, for a larger block). Each server's answer is read
// ahead by a goroutine of its own into at most 4 chunks of 256 KiB, so
// that a server goes on sending while the merge waits on another; then
// net/http's and TLS's buffers of the connection (tens of KiB), at
// most MaxInterfaces interfaces per server and MaxStatsBytes of
// statistics blocks kept for the end in all. So memory is about
// 2.2 MiB per server, whatever the size of the answer; a hostile
// server can add at most MaxInterfaceBytes of interface names and
// descriptions, and all of them together MaxStatsBytes of statistics.
//
// # Concurrency
//
// Run asks every server at once (a goroutine each: it asks, then reads
// the answer ahead), and merges on the caller's goroutine. Run is safe to call
// from many goroutines; a Config is not changed by it.
package federate
