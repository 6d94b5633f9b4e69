// Package pcapflate writes gzip members (RFC 1952, deflate of RFC 1951)
// of pcapng streams whose packets do not compress beyond their headers:
// random or encrypted payloads, where deflate's matcher hashes every
// payload byte and finds nothing, and codes every byte with Huffman
// codes that cannot make it smaller.
//
// As internal/pcapzstd does for zstd, it seeks matches only in the head
// of each pcapng block (the block's fields and the packet's first bytes:
// link, network and transport headers) and in its last bytes, against
// an earlier block of the same length and the same bytes where IPv4 over
// Ethernet keeps its addresses, or else the block before (the matcher of
// internal/ngheads), within deflate's 32 KiB window. Deflate has no raw literals inside a coded
// block, so a run of at least storedMin literals (a payload) goes into a
// stored block, copied as it is; the heads, their matches and the short
// runs between them go into blocks with the fixed Huffman codes. Its
// members are ordinary gzip: zcat, Wireshark and every inflater read
// them.
//
// The input need not be pcapng: it is parsed as a sequence of blocks (a
// type and a total length of 4 bytes each, in the byte order of the
// section's header), and where a length is implausible the rest of the
// member is stored. The output is correct for any input; only its size
// depends on the structure. Text, which deflate's own levels compress
// well, is not this package's input: a caller judges a stream first
// (the store by the entropy of its first bytes).
//
// An Encoder is not safe for concurrent use. It holds about 1.2 MiB of
// history and 208 KiB of output (64 KiB gathered before a write, and a
// chunk of 128 KiB coded); Write does not allocate once those are
// grown.
package pcapflate
