// Package pcapfile reads classic pcap and pcapng capture files and writes
// pcapng (and classic pcap, for fixtures and test generators).
//
// # Reading
//
// NewReader detects the format from the first bytes: classic pcap with
// microsecond or nanosecond timestamps in either byte order, or pcapng in
// either byte order (per section). Reader.ReadInto returns one packet at a
// time with its timestamp converted to Unix nanoseconds and its interface
// given as an index into Reader.Interfaces, global across pcapng sections:
// the interfaces of a later section are numbered after those of earlier
// ones.
//
// pcapng blocks read: Section Header, Interface Description (if_name,
// if_description, if_tsresol in both base-10 and base-2 forms, if_tsoffset),
// Enhanced Packet, Simple Packet and the obsolete Packet Block. Every other
// block (name resolution, statistics, decryption secrets, custom, unknown)
// is skipped by its length, after its lengths are checked.
//
// Timestamps: resolutions of 10^-9 s and coarser convert exactly; finer
// ones (10^-10 and below, 2^-p) round toward zero to the nanosecond. Times
// past the int64 nanosecond range (year 2262) wrap.
//
// Limits: no captured length above ReaderConfig.MaxPacket is accepted
// (ErrTooLarge), and the Reader never allocates from a length it has not
// checked against that limit, so hostile input cannot make it allocate more
// than about MaxPacket+BlockSlack bytes (plus the 256 KiB base buffer).
//
// Malformed input is reported as *FormatError, carrying the offset of the
// bad header, record or block and one of ErrUnknownFormat, ErrTruncated,
// ErrTooLarge or ErrMalformed. A clean end of input is io.EOF.
//
// # Buffer ownership
//
// Packet.Data returned by Reader.ReadInto aliases the Reader's internal
// buffer and is valid only until the next ReadInto or ReadPacket call; copy
// it to keep it, or use Reader.ReadPacket, which returns a copy the caller
// owns. The slice returned by Reader.Interfaces must not be modified.
// Writers never retain the data slices passed to them.
//
// # Writing
//
// NgWriter writes little-endian pcapng: one Section Header Block, then
// Interface Description, Enhanced Packet and Interface Statistics blocks,
// with nanosecond timestamps. PcapWriter writes classic little-endian pcap.
// Neither buffers: give them a bufio.Writer. Their per-packet methods do
// not allocate.
//
// # Concurrency
//
// Reader, NgWriter and PcapWriter are not safe for concurrent use; use each
// from one goroutine at a time.
package pcapfile
