// Package collector receives batches from agents and writes them to
// pcapng files, one directory per agent.
//
// The core (Core, Session) is independent of any transport: a transport
// authenticates the agent, decodes frames and drives a Session with
// Batch, Iface, Stats, Commit and End. Server is the TCP transport: TLS
// (client certificates bound to agent names), a shared token, or plain
// TCP only when Config.Insecure says so; heartbeats and a peer timeout
// end sessions of dead agents within seconds; every connection's frames
// are read into buffers reserved from one budget (Config.ReadMemory),
// and a connection over it waits without reading. UDPServer is the UDP
// transport (plaintext, Insecure only): no acknowledgements, sessions
// by source address, and exact counts of lost, reordered and duplicated
// datagrams (UDPServer.AgentCounts).
//
// Delivery contract (docs/reliability.md): a batch is acknowledged
// (Commit returns its sequence number) only after its packets were
// handed to the OS with write(2), and synced too under FsyncPerBatch.
// Duplicates (a sequence number at or below the instance's high-water
// mark) are counted and never written. The high-water marks are kept in
// the files (a mark on the last packet of every batch) and rebuilt from
// them on start, when unfinished files are repaired, so they survive a
// kill -9.
package collector
