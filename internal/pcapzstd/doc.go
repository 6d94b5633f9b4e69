// Package pcapzstd writes zstd frames (RFC 8878) of pcapng streams
// whose packets do not compress beyond their headers: random or
// encrypted payloads, where a general matcher hashes every payload and
// finds nothing. It seeks matches only in the head of each pcapng block
// (the block's fields and the packet's first bytes: link, network and
// transport headers), against an earlier block of the same length and
// the same bytes where IPv4 over Ethernet keeps its addresses, or else
// the block before (internal/ngheads, the matcher it shares with
// internal/pcapflate); everything else is stored as literals. A block of
// the frame (128 KiB of input) whose bytes do not look random (a
// sample's entropy under 6.5 bits a byte: traffic that turned to text
// after the stream was judged) is matched everywhere instead, by a
// greedy search of the window as general encoders do. Its frames are
// ordinary zstd: every decoder reads them.
//
// A frame carries no content size and no checksum and declares a window
// of 1 MiB; its blocks use raw literals and the predefined code tables,
// so no block depends on an earlier one except through matches and the
// repeat offsets. Flush ends the current block, so that the bytes
// written so far, followed by an empty last block, are a complete frame
// (what a store's repair appends after a crash).
//
// The input need not be pcapng: it is parsed as a sequence of blocks (a
// type and a total length of 4 bytes each, the byte order the section's
// header gives), and where a length is implausible the rest of the
// frame is stored as literals. The output is correct for any input;
// only its size depends on the structure.
//
// An Encoder is not safe for concurrent use. It holds up to 3 MiB of
// history, 128 KiB of output and tables of 288 KiB; Write does not
// allocate once those are grown.
package pcapzstd
