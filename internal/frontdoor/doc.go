// Package frontdoor is what every listener of a pcapsync process puts
// between the network and its protocol, written once: the agents' TCP
// port, the tap, the query listener and the metrics listener all accept
// through it.
//
//   - Listener caps the connections open at once, in all (MaxConns) and
//     per source address (MaxPerSource). A connection over a cap is
//     accepted and closed at once (reset, no TIME_WAIT), counted and
//     logged at most once per interval, so that the kernel's backlog
//     never fills with clients that are never served. An accept that
//     fails for lack of descriptors or memory pauses with backoff
//     instead of spinning.
//   - ListenTCP and ListenUDP (and Listen) bind the stack an address
//     names (ListenNetwork): 0.0.0.0 IPv4 only, [::] IPv6 only, an
//     empty host both, so that a firewall rule for the address covers
//     what listens.
//   - Sniff tells a TLS client from a plain one by its first byte;
//     Handshake runs a TLS handshake within a deadline.
//   - TokenEqual compares tokens in constant time; BearerToken reads an
//     Authorization header whose scheme is any case of "Bearer"
//     (RFC 7235).
//   - RateLog logs a refusal at most once per interval and reason (16
//     reasons, and one line for the rest), with the count of those it
//     did not log, so that refused clients cannot flood the log.
//   - HTTPServer returns an http.Server with header and idle deadlines;
//     CloseAfter makes a refusal the last answer of its connection.
//
// Budget splits the process's descriptors (RLIMIT_NOFILE) between the
// store's files and the listeners' caps, so that no client can take the
// descriptors the store needs to write.
//
// All types are safe for concurrent use.
package frontdoor
