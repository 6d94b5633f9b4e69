// Package tap serves what the collector writes, live, as pcapng streams
// over TCP: Wireshark (-k -i TCP@HOST:PORT), tshark, `nc HOST PORT |
// tcpdump -r -` and `pcapsync tail` read them.
//
// A Tap is a collector.Feed. Its Batch copies the packets each client
// selected into that client's bounded queue and never blocks: a client
// whose queue is full is dropped (counted in Counters.DroppedSlow), so a
// slow viewer never slows the collector or its files. With no client
// connected Batch returns at once and allocates nothing. Each client has
// one goroutine that runs the client's BPF filter and writes its stream:
// a Section Header Block, an Interface Description Block for every
// (agent, interface) the first time one of its packets is sent (named
// "<agent>:<interface>", as in the files), then Enhanced Packet Blocks.
//
// A client may send one request line within RequestWait of connecting
// (see ParseRequest and docs/tap.md); one that sends nothing, such as
// Wireshark's TCP@ input, gets its listener's default selection. A
// second goroutine per client reads the client's side, which carries
// nothing more: a reset drops the client at once, and after a FIN (a
// client gone, or one that only closed its sending side) a client sent
// nothing for ProbeInterval is sent a block that changes nothing in its
// stream, which a client gone answers with a reset.
//
// Stream is the client: it sends a request line and copies the stream
// that comes back (`pcapsync tail --tap`). Filter, the
// clients' filter, is exported for other readers of batches
// (redisfeed.Copy), so that a tcpdump expression selects the same
// packets wherever it runs.
package tap
