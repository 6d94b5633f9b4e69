// Package wire is pcapsync's binary protocol: the one language spoken by
// agents and collectors over every transport (TCP; UDP datagrams of whole
// frames, see datagram.go; Redis and Kafka carry the same batches later).
//
// A stream is a sequence of frames. Every frame starts with an 8-byte
// header (magic, version, type, flags, payload length) and its payload
// follows. docs/wire-format.md has the byte diagrams; the constants in
// frame.go are the authority.
//
// Encoders append to a caller's slice and allocate nothing in the steady
// state. Decoders check every length against a limit before they slice or
// allocate, return spans capped with b[:n:n], and never retain the input:
// a decoded value that holds []byte aliases the frame payload it came from
// and is valid only until that payload is reused (FrameReader gives its
// buffer back to a pool on the next call, or on Release). Payload buffers
// come from pools by size class; a Memory bounds what a group of
// FrameReaders (the collector's connections) may hold at once, and makes
// a reader over it wait instead of allocating. Nothing in this package is
// safe for concurrent use unless its doc comment says so.
package wire
