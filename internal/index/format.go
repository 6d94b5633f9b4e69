package index

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
)

// An index file (Version 5), all integers little-endian:
//
//	header:
//	  0  magic      "PSIX"
//	  4  version    u8 (5; 1 to 4 are read too)
//	  5  codec      u8 (Codec of the data file)
//	  6  headIfaces u16: interfaces described by the data file's head
//	  8  blockBytes u32: the block size the writer aimed at
//	  12 nameLen    u16
//	  14 name       [nameLen]: the data file's final name (no directory, no ".part")
//	  .. crc        u32: CRC-32C of the header's bytes before it
//	records, each:
//	  0  kind       u8 ('B' block, 'E' end)
//	  1  len        u32: payload bytes
//	  5  payload    [len]
//	  .. crc        u32: CRC-32C of kind, len and payload, seeded with the
//	                previous record's crc (the first record: the header's)
//	block payload (kind 'B'):
//	  0  seek    u64: data file offset where a decoder starts for this block
//	  8  raw     u64: offset in the decoded pcapng stream where the block starts
//	  16 rawEnd  u64: ... and where it ends
//	  24 first   i64: earliest packet time in the block (Unix ns)
//	  32 last    i64: latest packet time in the block (Unix ns)
//	  40 packets u32: bits 0-30 the block's packets; bit 31 (version 5
//	                on) set: they are in time order, each no earlier than
//	                the one before it in the file (Block.Ordered)
//	  44 ifaces  u32: interfaces described in the stream before rawEnd
//	  48 keys    u32: distinct keys added to the filter
//	  52 words   u32: filter size in 64-bit words
//	  56 filter  [words]u64: Bloom filter of the block's keys (bloom.go),
//	                probed min(7, max(1, words·64·ln2/keys)) times;
//	                every bit set: the block matches every key
//	end payload (kind 'E'), last record of the index of a closed file:
//	  0  dataSize u64: size of the data file on disk
//	  8  rawSize  u64: size of its decoded pcapng stream
//	  16 blocks   u32: block records before it
//	  20 ifaces   u32: interfaces the data file describes
//
// The chained checksums make the last record's crc a checksum over the
// whole index: an index is valid up to the first record that does not
// verify, and, for a closed data file, only whole with its end record.
// A writer appends records as it goes, so a reader of a file still
// being written reads the records complete so far.
//
// Changing the layout of the header or of a record, or the meaning of
// a field, takes a new Version; readers refuse versions they do not
// know (ErrVersion) and the data file is read without an index until
// `pcapsync index` rebuilds it. Record kinds may be added within a
// version only if readers may skip them: readers refuse unknown kinds.
//
// Version 5 gives bit 31 of a block's packets its meaning (the block's
// packets are in time order), which readers of version 4 would have
// read as a count of two billion packets more. A reader takes the bit
// as a claim like the block's times: a query releases a packet of an
// ordered block as soon as it is read, and one out of order after it
// ends the query with an error, not a packet written out of order.
//
// Version 4 changes what the filters mean, not the layout: a block's
// keys are never narrower than what libpcap's host, port and protocol
// primitives match in its packets (packetKeys: fields of headers cut
// short, IPv4 by the ethertype whatever its version nibble, ports at
// the offset the IPv4 header length says, the protocol after an IPv6
// fragment header, ...), and a block holding a packet of a link type
// whose keys are not read has every bit of its filter set. The filters
// of versions 1 to 3 may miss packets libpcap matches (Index.KeysWide):
// they are read, for times and offsets, but not asked for keys, and
// `pcapsync index` rebuilds them.
//
// Version 3 adds the codec CodecZstdFrames (a zstd file of a frame per
// block, whose blocks' seek offsets are frame starts), which readers of
// version 2 would have refused as damaged. Version 2 keys the IPv4
// addresses of ARP and RARP packets (arpKeys); version 1, with the same
// layout, did not: its filters cannot say whether a block holds an ARP
// packet naming an address (Index.KeysARP).
const (
	Version = 5
	// WideVersion is the first version whose filters are never
	// narrower than libpcap (Index.KeysWide).
	WideVersion = 4
	// MinVersion is the oldest version readers accept.
	MinVersion = 1
	// OrderedVersion is the first version that says which blocks are
	// in time order (Block.Ordered).
	OrderedVersion = 5

	headerFixed = 14
	recHead     = 5
	blockFixed  = 56
	endSize     = 24

	// orderedBit of a block's packets: Block.Ordered (version 5 on).
	orderedBit = 1 << 31

	kindBlock = 'B'
	kindEnd   = 'E'

	// MaxNameLen bounds a data file name in the header.
	MaxNameLen = 1024
	// maxWords bounds one block's filter (16 MiB): a reader checks
	// it before it slices.
	maxWords = 2 << 20
	// MaxFileSize bounds the index files Open reads.
	MaxFileSize = 1 << 30
)

var magic = [4]byte{'P', 'S', 'I', 'X'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Suffix is what a data file's name takes to name its index: the index
// of web1_20260101T000000.000Z.pcapng.gz is
// web1_20260101T000000.000Z.pcapng.gz.idx. The index of a file still
// being written (".part") is written as <final name>.idx.part and
// renamed with its data file.
const Suffix = ".idx"

const partSuffix = ".part"

// Path returns the path of the index of the data file at dataPath,
// which may end in ".part".
func Path(dataPath string) string {
	if base, ok := strings.CutSuffix(dataPath, partSuffix); ok {
		return base + Suffix + partSuffix
	}
	return dataPath + Suffix
}

// IsIndex reports whether name is the name of an index file (finished
// or being written) or of a timeline summary (BinsPath; finished or
// being written: .timeline.tmp<digits>): a file of this package beside
// a data file, not a data file.
func IsIndex(name string) bool {
	return strings.HasSuffix(strings.TrimSuffix(name, partSuffix), Suffix) ||
		strings.HasSuffix(name, BinsSuffix) || strings.Contains(name, BinsSuffix+tempSuffix)
}

// Codec is the compression of a data file, as its name says.
type Codec uint8

// Codecs of data files.
const (
	CodecNone Codec = iota // .pcapng: a reader may start at any block's raw offset
	CodecGzip              // .pcapng.gz: a block starts a gzip member
	CodecZstd              // .pcapng.zst: one zstd frame per file: decoding starts at 0
	// CodecZstdFrames is a .pcapng.zst file of several zstd frames, one
	// per block (the store's ZstdFramePerBlock): a block starts a frame,
	// as with gzip's members (version 3 on).
	CodecZstdFrames
)

// Seekable reports whether a decoder starts at a block's Seek (plain,
// gzip, zstd of a frame per block), rather than at the file's start
// (zstd of one frame).
func (c Codec) Seekable() bool { return c != CodecZstd }

// Framed reports whether a block's Seek is the start of a gzip member
// or zstd frame, which its decoder starts at.
func (c Codec) Framed() bool { return c == CodecGzip || c == CodecZstdFrames }

// CodecOf returns the codec of a data file by its name (with or without
// ".part").
func CodecOf(path string) Codec {
	switch name := strings.TrimSuffix(path, partSuffix); {
	case strings.HasSuffix(name, ".pcapng.gz"):
		return CodecGzip
	case strings.HasSuffix(name, ".pcapng.zst"):
		return CodecZstd
	}
	return CodecNone
}

func appendHeader(dst []byte, version byte, name string, c Codec, headIfaces, blockBytes int) ([]byte, uint32) {
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = append(dst, version, byte(c))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(min(headIfaces, 0xffff)))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(blockBytes))
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	crc := crc32.Checksum(dst[start:], castagnoli)
	return binary.LittleEndian.AppendUint32(dst, crc), crc
}

// appendRecord appends a record whose payload was appended to dst
// after a placeholder of recHead bytes at start, and returns the new
// chained crc.
func sealRecord(dst []byte, start int, kind byte, prev uint32) ([]byte, uint32) {
	dst[start] = kind
	binary.LittleEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-recHead))
	crc := crc32.Update(prev, castagnoli, dst[start:])
	return binary.LittleEndian.AppendUint32(dst, crc), crc
}

// appendBlockRecord appends the record of block b, chained to prev, and
// returns the new crc.
func appendBlockRecord(dst []byte, b *Block, version int, prev uint32) ([]byte, uint32) {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = le.AppendUint64(dst, uint64(b.Seek))
	dst = le.AppendUint64(dst, uint64(b.Raw))
	dst = le.AppendUint64(dst, uint64(b.RawEnd))
	dst = le.AppendUint64(dst, uint64(b.First))
	dst = le.AppendUint64(dst, uint64(b.Last))
	packets := uint32(b.Packets) &^ orderedBit
	if b.Ordered && version >= OrderedVersion {
		packets |= orderedBit
	}
	dst = le.AppendUint32(dst, packets)
	dst = le.AppendUint32(dst, uint32(b.Ifaces))
	dst = le.AppendUint32(dst, uint32(b.Keys))
	dst = le.AppendUint32(dst, uint32(len(b.filter)))
	for _, w := range b.filter {
		dst = le.AppendUint64(dst, w)
	}
	return sealRecord(dst, start, kindBlock, prev)
}

// appendEndRecord appends the end record, chained to prev.
func appendEndRecord(dst []byte, dataSize, rawSize int64, blocks, ifaces int, prev uint32) ([]byte, uint32) {
	le := binary.LittleEndian
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = le.AppendUint64(dst, uint64(dataSize))
	dst = le.AppendUint64(dst, uint64(rawSize))
	dst = le.AppendUint32(dst, uint32(blocks))
	dst = le.AppendUint32(dst, uint32(ifaces))
	return sealRecord(dst, start, kindEnd, prev)
}

// Append appends the encoding of ix to dst: the index file Parse reads
// back as ix (with its version, name, blocks and filters as they are,
// and the end record when ix is Final). A built index read whole and
// appended again is the same bytes.
func (ix *Index) Append(dst []byte) []byte {
	dst, crc := appendHeader(dst, byte(ix.Version), ix.Name, ix.Codec, ix.HeadIfaces, ix.BlockBytes)
	for i := range ix.All {
		dst, crc = appendBlockRecord(dst, &ix.All[i], ix.Version, crc)
	}
	if ix.Final {
		dst, _ = appendEndRecord(dst, ix.DataSize, ix.RawSize, len(ix.All), ix.Ifaces, crc)
	}
	return dst
}
