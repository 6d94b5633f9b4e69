package index

import (
	"encoding/binary"
	"math"
)

// DefaultBlockBytes is the decoded size a block aims at: a writer ends
// a block at the first point where a reader can start (a commit) after
// at least this many bytes.
const DefaultBlockBytes = 512 << 10

// Builder encodes the index of one data file while the file is
// written: Reset at the file's start, Add for every packet, EndBlock at
// points where a reader can start decoding, Finish when the file is
// closed. The encoded records accumulate in Pending until the caller
// appends them to the index file and calls Clear. Add and EndBlock do
// not allocate once the Builder has seen blocks as large as the
// current one. A Builder is not safe for concurrent use; its zero
// value is ready for Reset.
type Builder struct {
	set    keySet
	filter []uint64 // scratch for the filter being encoded
	out    []byte
	codec  Codec
	crc    uint32
	blocks int
	ifaces int // at the end of the last block

	// The block being built.
	seek, raw   int64
	first, last int64
	packets     uint32
	disorder    bool // a packet earlier than one before it
}

// Reset starts the index of data file name (its final name, without a
// directory) compressed with c, whose head (section header and
// interface descriptions) describes headIfaces interfaces and ends in
// the decoded stream at raw, where the first block starts; seek is the
// data file offset a decoder starts at for it. The header goes to
// Pending, replacing whatever was there.
func (b *Builder) Reset(name string, c Codec, headIfaces, blockBytes int, seek, raw int64) {
	b.out, b.crc = appendHeader(b.out[:0], Version, name[:min(len(name), MaxNameLen)], c, headIfaces, blockBytes)
	b.codec = c
	b.blocks, b.ifaces = 0, headIfaces
	b.start(seek, raw)
}

func (b *Builder) start(seek, raw int64) {
	b.set.reset()
	b.seek, b.raw = seek, raw
	b.first, b.last, b.packets, b.disorder = math.MaxInt64, math.MinInt64, 0, false
}

// Add indexes one packet of the current block: captured on an
// interface of link type linkType at ts (Unix ns), data its captured
// bytes (see packetKeys for what is read of them). It reports same
// when the packet is an Ethernet frame of IPv4 without options, of TCP,
// UDP or SCTP and not a later fragment, whose protocol, addresses and
// ports are those of the IPv4 packet added before it in the block, in
// the same order (its keys are in the set already): what
// flow.Table.AddRepeat asks of its caller when that packet was the one
// just before.
func (b *Builder) Add(linkType uint32, ts int64, data []byte) (same bool) {
	b.first = min(b.first, ts)
	b.disorder = b.disorder || ts < b.last
	b.last = max(b.last, ts)
	b.packets++
	// The common case first: Ethernet, IPv4 without options, of the
	// flow of the packet before (ipv4Keys computes the same flow).
	if linkType == linkEthernet && len(data) >= 38 && data[12] == 0x08 && data[13] == 0x00 && data[14] == 0x45 {
		be := binary.BigEndian
		t := flow{a: be.Uint64(data[26:]), proto: uint32(data[23]) | 4<<8}
		if p := data[23]; be.Uint16(data[20:])&0x1fff == 0 && (p == 6 || p == 17 || p == 132) {
			t.ports = be.Uint32(data[34:])
			t.proto |= 1 << 16
		}
		if t == b.set.last {
			return t.proto&(1<<16) != 0
		}
	}
	packetKeys(&b.set, linkType, data)
	return false
}

// Packets returns the packets added to the current block.
func (b *Builder) Packets() int { return int(b.packets) }

// BlockRaw returns the decoded offset where the current block starts.
func (b *Builder) BlockRaw() int64 { return b.raw }

// Blocks returns the blocks ended so far.
func (b *Builder) Blocks() int { return b.blocks }

// EndBlock ends the current block at decoded offset rawEnd, with
// ifaces interfaces described in the stream before it, and starts the
// next one there, at data file offset nextSeek for a decoder. A block
// without packets and without new interfaces leaves no record.
func (b *Builder) EndBlock(rawEnd int64, ifaces int, nextSeek int64) {
	if b.packets > 0 || ifaces > b.ifaces {
		b.appendBlock(rawEnd, ifaces, nextSeek)
	}
	b.start(nextSeek, rawEnd)
}

// appendBlock appends the record of the current block, which ends at
// rawEnd, and on disk where the next block starts or the data file
// ends (end), for the filter's bound (bloomWords).
func (b *Builder) appendBlock(rawEnd int64, ifaces int, end int64) {
	first, last := b.first, b.last
	if b.packets == 0 {
		first, last = 0, 0
	}
	limit := max(end-b.seek, 0) / maxFilterShare
	if b.codec == CodecZstd {
		limit = (rawEnd - b.raw) / maxFilterShareZstd
	}
	words := 0
	if b.set.n > 0 {
		words = bloomWords(b.set.n, limit)
	}
	if b.set.wild {
		words = max(words, 1)
	}
	p := probes(words, b.set.n)
	if cap(b.filter) < words {
		b.filter = make([]uint64, words, 2*words)
	}
	f := b.filter[:words]
	clear(f)
	switch {
	case b.set.wild:
		// A packet of a link type whose keys are not read: the block
		// matches every key (every bit set).
		for i := range f {
			f[i] = ^uint64(0)
		}
	case words > 0:
		for _, k := range b.set.slots {
			if k != 0 {
				bloomAdd(f, k, p)
			}
		}
	}
	blk := Block{Seek: b.seek, Raw: b.raw, RawEnd: rawEnd, First: first, Last: last,
		Packets: int(b.packets), Ordered: !b.disorder, Ifaces: ifaces, Keys: b.set.n, filter: f}
	b.out, b.crc = appendBlockRecord(b.out, &blk, Version, b.crc)
	b.blocks++
	b.ifaces = ifaces
}

// Finish ends the current block at rawEnd (see EndBlock) and appends
// the end record: the data file is dataSize bytes on disk, its decoded
// stream rawSize bytes, describing ifaces interfaces. Nothing may be
// added after it until the next Reset.
func (b *Builder) Finish(rawEnd int64, ifaces int, dataSize, rawSize int64) {
	if b.packets > 0 || ifaces > b.ifaces {
		b.appendBlock(rawEnd, ifaces, dataSize)
	}
	b.out, b.crc = appendEndRecord(b.out, dataSize, rawSize, b.blocks, ifaces, b.crc)
	b.start(0, rawEnd)
}

// Pending returns the records encoded since the last Clear (after
// Reset: the header first). The slice is valid until the next call of
// another method.
func (b *Builder) Pending() []byte { return b.out }

// Clear forgets Pending, once the caller wrote it.
func (b *Builder) Clear() { b.out = b.out[:0] }
