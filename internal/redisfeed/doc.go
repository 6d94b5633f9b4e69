// Package redisfeed publishes the batches a collector writes to Redis
// Streams, one stream per agent, and follows such a stream back into
// packets.
//
// Publishing (Feed) is a collector.Feed: it copies each written batch
// into a bounded queue and returns at once; one goroutine compresses the
// batches (s2 or zstd, reused coders) and appends them to their streams
// with pipelined XADDs, each trimmed to a length or an age (MAXLEN ~ or
// MINID ~). When Redis is down, slow or full, batches are dropped and
// counted, never waited for: the files come first. The publisher logs
// when Redis goes away and when it is back (once each, not per batch)
// and tries again with a growing backoff.
//
// Following (Follow) reads a stream from some time back or from now on
// with XREAD and hands back each entry's batch, decompressed and
// checked, with the interfaces its records refer to.
// Copy writes what Follow returns as pcapng, selected by interface and
// by a tcpdump filter (filter.Filter): `pcapsync tail --redis`.
//
// A stream entry (docs/wire-format.md, "Redis stream"):
//
//	key     PREFIX<agent>            (default prefix "pcapsync:")
//	id      Redis's own, <ms>-<n>    (the time it was added, the server's clock)
//	host    the host the agent reported
//	ifaces  Iface frames 0..n-1: every interface of the agent's session
//	batch   one batch frame, records compressed (codec in its flags)
//
// Every entry carries the interfaces, so that a reader may start at any
// entry; they cost some 20 bytes each.
package redisfeed
