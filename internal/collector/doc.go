// Package collector receives batches from agents and writes them,
// through a store.Store, to pcapng files, one directory per agent.
//
// The core (Core and its sessions) is independent of any transport: a
// transport authenticates the agent, decodes frames and drives a
// session (begin, batch, iface, recordStats, commit, end). The two
// transports, in this package, are its only callers: Server is the TCP
// one: TLS (client certificates bound to agent names), a shared token,
// or plain TCP only when Config.Insecure says so; heartbeats and a peer
// timeout end sessions of dead agents within seconds; every
// connection's frames are read into buffers reserved from one budget
// (Config.ReadMemory), and a connection over it waits without reading.
// UDPServer is the UDP one (plaintext, Insecure only): no
// acknowledgements, sessions by source address, and exact counts of
// lost, reordered and duplicated datagrams (UDPServer.AgentCounts).
//
// The core checks and deduplicates batches and counts them (Counters,
// AgentStats); where they go is its destination, chosen once in
// NewCore: a store (package store: the batches decompressed, validated
// and written; files, marks, rotation, repair and the state file are
// the store's; live views see every batch written, Feed) or a Sink
// (Config.Sink, an ingest collector: every frame handed on as it came,
// acknowledged once the sink made it durable). Each session appends to
// its destination's appender (destination.go) without knowing which.
//
// Delivery contract (docs/reliability.md): a batch is acknowledged (a
// session's commit returns its sequence number) only after its packets
// were handed to the OS with write(2), and synced too under
// store.FsyncPerBatch. Duplicates (a sequence number at or below the
// instance's high-water mark) are counted and never written. The
// high-water marks are kept in the files (a mark on the last packet of
// every batch) and rebuilt from them on start, when unfinished files
// are repaired, so they survive a kill -9.
package collector
