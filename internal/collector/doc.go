// Package collector receives batches from agents and writes them to
// pcapng files, one directory per agent.
//
// The core (Core, Session) is independent of any transport: a transport
// authenticates nothing yet, decodes frames and drives a Session with
// Batch, Iface, Stats, Commit and End. Server is the TCP transport.
//
// Delivery contract of this version: a batch is acknowledged (Commit
// returns its sequence number) only after its packets were handed to the
// OS with write(2). Duplicates (a sequence number at or below the
// instance's high-water mark) are counted and never written. The
// high-water marks live in memory: a restarted collector accepts what
// a reconnecting agent resends, which after a clean shutdown is exactly
// what was not acknowledged.
package collector
