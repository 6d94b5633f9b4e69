package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"slices"
)

// Batch payload (frame type TypeBatch), integers little-endian:
//
//	 0               8               16      20      24      28
//	+---------------+---------------+-------+-------+-------+----------------
//	| seq (u64)     | base time(i64)| count |rawlen | crc32c| records ...
//	+---------------+---------------+-------+-------+-------+----------------
//
// seq is the agent instance's batch sequence number, starting at 1 and
// increasing by one per batch. base time is the first record's timestamp
// in Unix nanoseconds. count is the number of records. rawlen is the
// length of the records section before compression (equal to its length
// on the wire for CodecNone). crc32c (Castagnoli) covers payload bytes
// 0..24 followed by the records section as sent, so corruption is caught
// before anything is decompressed or written; a batch whose frame flags
// have FlagUnchecked carries 0 there instead and no checksum, for a
// transport that authenticates every byte itself (TLS).
//
// The records section holds the packets' data back to back, then their
// metadata, then the data's length:
//
//	+-------------------------+---------------------------+--------------+
//	| data [sum of caplens]   | count x record metadata   | data len u32 |
//	+-------------------------+---------------------------+--------------+
//
// Each record's metadata is a tag byte and up to four little-endian
// fields, as short as their values allow:
//
//	+-----+--------------+------------+--------------+------------------+
//	| tag | ts delta [t] | caplen [c] | ifindex [0|2] | origlen-caplen [0|4] |
//	+-----+--------------+------------+--------------+------------------+
//	tag bits 0-3: t, 0..8; bits 4-5: c-1 (c is 1..4); bit 6: ifindex
//	present (else 0); bit 7: origlen-caplen present (else 0)
//
// Record i's data is the caplen bytes after those of records 0..i-1. ts
// delta is the zigzag-encoded difference from the previous record's
// timestamp (the first record's from base time), so records need not be
// in time order. What repeats (sequence, source, base time) lives once in
// the batch header; a typical record spends about 5 bytes on metadata
// against the 22 of a fixed layout. Keeping the metadata together makes
// reading it a walk over a few kilobytes instead of a hop through every
// packet; the tag gives every field's
// offset at once, so neither side branches on a field's length (LEB128
// varints, the first version, did: a misprediction per field).
const BatchHeaderSize = 28

// RecordMaxOverhead is the most metadata bytes one record can take: the
// tag, 8 bytes of timestamp delta, 4 of caplen, 2 of interface index
// and 4 of origlen-caplen.
const RecordMaxOverhead = 19

// TrailerSize is the records section's data length field, at its end.
const TrailerSize = 4

// minRecord is the smallest possible record (a tag and a one-byte
// caplen, no data); it bounds count before any work is done.
const minRecord = 2

// FlagUnchecked, in a batch frame's flags, says the batch has no
// checksum: its crc32c field is 0 and is not verified. Agents set it
// inside TLS, whose AEAD already authenticates every byte (see
// docs/wire-format.md); a receiver accepts it only where it said so
// (BatchLimits.Unchecked).
const FlagUnchecked uint8 = 0x10

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var zeroHeaders [HeaderSize + BatchHeaderSize]byte

// BatchEncoder builds one batch frame in a caller's buffer: the data
// goes there as records are appended, their metadata into the encoder's
// own buffer until the records section is sealed (Records, Finish). The
// zero value is not ready: call Reset first. Not safe for concurrent use.
type BatchEncoder struct {
	// Unchecked seals batches without a checksum (FlagUnchecked). It
	// outlives Reset.
	Unchecked bool

	buf    []byte // headers' room, then the data; then meta and trailer once sealed
	meta   []byte // records' metadata until sealed
	count  uint32
	base   int64
	prev   int64
	sealed bool
	// sum is the CRC-32C of buf[HeaderSize+BatchHeaderSize:summed]: the
	// data is summed every sumStep bytes as it is appended, while it is
	// still in the cache, not in one pass over the batch at Finish.
	sum    uint32
	summed int
}

// sumStep is how much appended data the encoder sums at a time.
const sumStep = 32 << 10

// Reset starts a new batch in dst[:0], reusing its capacity.
func (e *BatchEncoder) Reset(dst []byte) {
	e.buf = append(dst[:0], zeroHeaders[:]...)
	e.meta = e.meta[:0]
	e.count = 0
	e.sealed = false
	e.sum, e.summed = 0, len(e.buf)
}

// Len returns the size of the frame so far, headers included.
func (e *BatchEncoder) Len() int {
	if e.sealed {
		return len(e.buf)
	}
	return len(e.buf) + len(e.meta) + TrailerSize
}

// Count returns the number of records appended since Reset.
func (e *BatchEncoder) Count() int { return int(e.count) }

// Append adds one record. ts is Unix nanoseconds; origLen below
// len(data) is raised to len(data). It allocates only when a buffer
// must grow: size the caller's buffer for the batch limit plus
// RecordMaxOverhead plus the largest packet and, after the first few
// batches have grown the encoder's metadata buffer, it never does.
// Appending to a sealed batch, or an interface index of MaxInterfaces or
// more (which no hello can declare), panics: both are the caller's bugs.
func (e *BatchEncoder) Append(ts int64, ifIndex, origLen uint32, data []byte) {
	if e.sealed {
		panic("wire: Append after the records section was sealed")
	}
	if ifIndex >= MaxInterfaces {
		panic(fmt.Sprintf("wire: interface index %d, at most %d interfaces", ifIndex, MaxInterfaces))
	}
	// The data first: should reading it fault (a mapped file cut short,
	// with debug.SetPanicOnFault), the batch is left as it was.
	e.buf = append(e.buf, data...)
	if e.count == 0 {
		e.base, e.prev = ts, ts
	}
	d := ts - e.prev
	e.prev = ts
	capLen := uint32(len(data))
	origLen = max(origLen, capLen)
	n := len(e.meta)
	if cap(e.meta)-n < metaRoom {
		e.meta = slices.Grow(e.meta, metaRoom)
	}
	e.meta = e.meta[:n+putMeta((*[metaRoom]byte)(e.meta[n:n+metaRoom]), uint64(d<<1)^uint64(d>>63), ifIndex, capLen, origLen-capLen)]
	e.count++
	if len(e.buf)-e.summed >= sumStep && !e.Unchecked {
		e.sum = crc32.Update(e.sum, castagnoli, e.buf[e.summed:])
		e.summed = len(e.buf)
	}
}

// metaRoom is the spare room putMeta needs: RecordMaxOverhead, plus what
// its 8-byte store of the timestamp delta may write past a short record.
const metaRoom = RecordMaxOverhead + 8

// putMeta writes one record's metadata at h[0:] and returns its length.
// Every field is stored at full width at the offset the tag gives and
// the offsets advance by the field's length (its bytes past that are
// overwritten by the next field, or cut off by the caller), so no branch
// depends on the values. ifIndex must be below 65536 (MaxInterfaces).
func putMeta(h *[metaRoom]byte, zz uint64, ifIndex, capLen, extra uint32) int {
	t := (bits.Len64(zz) + 7) >> 3       // 0..8
	c := (bits.Len32(capLen|1) + 7) >> 3 // 1..4
	hasIf := b2i(ifIndex != 0)
	hasEx := b2i(extra != 0)
	h[0] = byte(t | (c-1)<<4 | hasIf<<6 | hasEx<<7)
	i := 1
	binary.LittleEndian.PutUint64(h[i:], zz)
	i += t
	binary.LittleEndian.PutUint32(h[i:], capLen)
	i += c
	binary.LittleEndian.PutUint16(h[i:], uint16(ifIndex))
	i += 2 * hasIf
	binary.LittleEndian.PutUint32(h[i:], extra)
	return i + 4*hasEx
}

// getMeta reads one record's metadata from h (zero past the metadata's
// end) and returns it with its length; ok is false for a tag whose
// timestamp delta would be longer than 8 bytes.
func getMeta(h *[RecordMaxOverhead]byte) (zz uint64, ifIndex, capLen, extra uint32, n int, ok bool) {
	tag := h[0]
	t := int(tag & 15)
	c := int(tag>>4&3) + 1
	hasIf := int(tag >> 6 & 1)
	hasEx := int(tag >> 7)
	i := 1
	t = min(t, 8)
	zz = binary.LittleEndian.Uint64(h[i:]) & (1<<(8*t) - 1) // 1<<64 is 0
	i += t
	capLen = binary.LittleEndian.Uint32(h[i:]) & uint32(1<<(8*c)-1)
	i += c
	ifIndex = uint32(binary.LittleEndian.Uint16(h[i:])) & -uint32(hasIf)
	i += 2 * hasIf
	extra = binary.LittleEndian.Uint32(h[i:]) & -uint32(hasEx)
	return zz, ifIndex, capLen, extra, i + 4*hasEx, tag&15 <= 8
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// seal appends the metadata and the trailer to the data, once.
func (e *BatchEncoder) seal() {
	if e.sealed {
		return
	}
	dataLen := len(e.buf) - HeaderSize - BatchHeaderSize
	e.buf = append(e.buf, e.meta...)
	e.buf = binary.LittleEndian.AppendUint32(e.buf, uint32(dataLen))
	e.sealed = true
}

// Finish completes the frame with sequence number seq and returns it:
// frame header, batch header and records, ready to write. The returned
// slice aliases the encoder's buffer and is valid until the next Reset.
func (e *BatchEncoder) Finish(seq uint64) []byte {
	e.seal()
	var sum func([]byte) uint32
	if !e.Unchecked {
		// The header, then the records: what was summed of them as
		// they came, and the rest.
		sum = func(p []byte) uint32 {
			records := crc32.Update(e.sum, castagnoli, e.buf[e.summed:])
			return crcJoin(crc32.Checksum(p[:24], castagnoli), records, len(p)-BatchHeaderSize)
		}
	}
	return finish(e.buf, seq, e.base, e.count, uint32(len(e.Records())), CodecNone, sum)
}

// batchCRC is the checksum of batch payload p: bytes 0..24 and the
// records section, skipping the checksum field itself.
func batchCRC(p []byte) uint32 {
	return crc32.Update(crc32.Checksum(p[:24], castagnoli), castagnoli, p[BatchHeaderSize:])
}

// Records seals and returns the records section appended since Reset,
// for a caller that compresses it (see FinishCompressed). It aliases the
// encoder's buffer. Nothing can be appended after it.
func (e *BatchEncoder) Records() []byte {
	e.seal()
	return e.buf[HeaderSize+BatchHeaderSize:]
}

// CompressedFrame starts a compressed frame in dst: it returns dst[:0]
// with room for the headers, to which the caller appends the compressed
// records before calling FinishCompressed.
func CompressedFrame(dst []byte) []byte { return append(dst[:0], zeroHeaders[:]...) }

// FinishCompressed completes frame, which holds the headers' room (see
// CompressedFrame) followed by the records section of e compressed with
// codec, as batch seq: the batch header keeps e's base time, count and
// the uncompressed length, and the checksum covers the records as sent.
// It returns frame with the headers filled in.
func (e *BatchEncoder) FinishCompressed(frame []byte, seq uint64, codec Codec) []byte {
	var sum func([]byte) uint32
	if !e.Unchecked {
		sum = batchCRC
	}
	return finish(frame, seq, e.base, e.count, uint32(len(e.Records())), codec, sum)
}

// FinishFrame completes frame, which holds the headers' room (see
// CompressedFrame) followed by b's records section as sent with codec
// (b.Records as they are for CodecNone, or compressed), as a batch frame
// with b's sequence number, base time, count and RawLen, the checksum
// over the records as sent (always: a re-framed batch may be stored,
// whatever transport brought it). It returns frame with the headers
// filled in. It re-frames a batch that was parsed (and perhaps
// decompressed), for a consumer that passes it on (the collector's
// Redis feed).
func (b *Batch) FinishFrame(frame []byte, codec Codec) []byte {
	return finish(frame, b.Seq, b.BaseTime, b.Count, b.RawLen, codec, batchCRC)
}

// finish fills in the headers of frame b; sum gives the checksum of its
// payload (with the checksum field still zero), nil for an unchecked
// batch.
func finish(b []byte, seq uint64, base int64, count, rawLen uint32, codec Codec, sum func(p []byte) uint32) []byte {
	flags := uint8(codec)
	if sum == nil {
		flags |= FlagUnchecked
	}
	AppendHeader(b[:0], TypeBatch, flags, uint32(len(b)-HeaderSize))
	p := b[HeaderSize:]
	binary.LittleEndian.PutUint64(p[0:], seq)
	binary.LittleEndian.PutUint64(p[8:], uint64(base))
	binary.LittleEndian.PutUint32(p[16:], count)
	binary.LittleEndian.PutUint32(p[20:], rawLen)
	var crc uint32
	if sum != nil {
		crc = sum(p)
	}
	binary.LittleEndian.PutUint32(p[24:], crc)
	return b
}

// Batch is a decoded batch header. Records aliases the frame payload; it
// is compressed with Codec unless that is CodecNone. A transport that
// decompresses it sets Records to the result and Codec to CodecNone.
type Batch struct {
	Seq       uint64
	BaseTime  int64
	Count     uint32
	Codec     Codec
	Unchecked bool   // sent without a checksum (FlagUnchecked)
	RawLen    uint32 // length of the records section uncompressed
	Records   []byte
}

// BatchLimits bounds a batch beyond the frame limit. Zero means default.
type BatchLimits struct {
	// MaxRecords caps the record count of one batch. 0 means 1<<20.
	MaxRecords uint32
	// Unchecked accepts batches without a checksum (FlagUnchecked):
	// set it where the transport authenticates every byte, or where
	// the sender's choice is trusted. Without it they are refused
	// (ErrUnchecked).
	Unchecked bool
	// Verified skips the batch's own checksum: the transport has
	// checked one that covers the same bytes end to end (a Kafka record
	// batch's CRC-32C, computed by the producer and checked by the
	// consumer).
	Verified bool
}

// ParseBatch checks a batch payload (its frame's flags and bytes): size,
// checksum, codec, and a count that the bytes can hold. It does not
// decode records; use Iter, and call Validate first when nothing may be
// acted on unless the whole batch is good.
func ParseBatch(flags uint8, p []byte, lim BatchLimits) (Batch, error) {
	var b Batch
	if len(p) < BatchHeaderSize {
		return b, fmt.Errorf("batch: %d bytes, header needs %d: %w", len(p), BatchHeaderSize, ErrTruncated)
	}
	b.Seq = binary.LittleEndian.Uint64(p[0:])
	b.BaseTime = int64(binary.LittleEndian.Uint64(p[8:]))
	b.Count = binary.LittleEndian.Uint32(p[16:])
	b.RawLen = binary.LittleEndian.Uint32(p[20:])
	want := binary.LittleEndian.Uint32(p[24:])
	b.Codec = Codec(flags & 0x0f)
	b.Unchecked = flags&FlagUnchecked != 0
	if flags&^(0x0f|FlagUnchecked) != 0 {
		return b, fmt.Errorf("batch seq %d: flags 0x%02x: %w", b.Seq, flags, ErrFlags)
	}
	b.Records = p[BatchHeaderSize:len(p):len(p)]
	switch {
	case b.Unchecked && !lim.Unchecked:
		return b, fmt.Errorf("batch seq %d: %w", b.Seq, ErrUnchecked)
	case b.Unchecked && want != 0:
		return b, fmt.Errorf("batch seq %d: no checksum flagged, but crc32c field 0x%08x: %w", b.Seq, want, ErrMalformed)
	case !b.Unchecked && !lim.Verified:
		if got := batchCRC(p); got != want {
			return b, fmt.Errorf("batch seq %d: crc32c 0x%08x, header says 0x%08x: %w", b.Seq, got, want, ErrChecksum)
		}
	}
	if !b.Codec.Known() {
		return b, fmt.Errorf("batch seq %d: %s: %w", b.Seq, b.Codec, ErrFlags)
	}
	if b.Codec == CodecNone && int(b.RawLen) != len(b.Records) {
		return b, fmt.Errorf("batch seq %d: records length %d, header says %d: %w", b.Seq, len(b.Records), b.RawLen, ErrMalformed)
	}
	maxRec := lim.MaxRecords
	if maxRec == 0 {
		maxRec = 1 << 20
	}
	if b.Count > maxRec {
		return b, fmt.Errorf("batch seq %d: %d records over limit %d: %w", b.Seq, b.Count, maxRec, ErrTooLarge)
	}
	if uint64(b.Count)*minRecord+TrailerSize > uint64(b.RawLen) {
		return b, fmt.Errorf("batch seq %d: %d records cannot fit in %d bytes: %w", b.Seq, b.Count, b.RawLen, ErrMalformed)
	}
	return b, nil
}

// Record is one packet. Data aliases the batch it was decoded from.
type Record struct {
	Timestamp int64 // Unix nanoseconds
	IfIndex   uint32
	OrigLen   uint32 // >= len(Data)
	Data      []byte // captured bytes, capped: appending to it copies
}

// Iter returns an iterator over the batch's records that rejects any
// interface index >= numIfaces. Compressed records must be decompressed
// first (see Batch); the iterator of a compressed batch fails at once.
func (b *Batch) Iter(numIfaces uint32) RecordIter {
	if b.Codec != CodecNone {
		return RecordIter{err: fmt.Errorf("batch seq %d: records still compressed with %s", b.Seq, b.Codec)}
	}
	it := RecordIter{prev: b.BaseTime, left: b.Count, nIf: numIfaces, seq: b.Seq}
	r := b.Records
	if len(r) < TrailerSize {
		it.err = fmt.Errorf("batch seq %d: records section of %d bytes, no room for its trailer: %w", b.Seq, len(r), ErrTruncated)
		return it
	}
	end := len(r) - TrailerSize
	dataLen := binary.LittleEndian.Uint32(r[end:])
	if uint64(dataLen) > uint64(end) {
		it.err = fmt.Errorf("batch seq %d: trailer says %d data bytes, the section holds %d: %w", b.Seq, dataLen, end, ErrMalformed)
		return it
	}
	// meta's capacity runs on through the trailer, so that Next can
	// read RecordMaxOverhead bytes in place for all but the last few
	// records.
	it.data, it.meta = r[:dataLen:dataLen], r[dataLen:end]
	return it
}

// Validate decodes every record without acting on it and checks that the
// bytes hold exactly Count well-formed records. It allocates nothing.
func (b *Batch) Validate(numIfaces uint32) error {
	it := b.Iter(numIfaces)
	var r Record
	for {
		if err := it.Next(&r); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// Decode is Validate keeping what it decodes: it returns the batch's
// records, appended to dst[:0] (no allocation when dst has room for
// Count of them), so that a caller that must check a whole batch before
// acting on any of it does not decode it twice. Data aliases the batch.
func (b *Batch) Decode(numIfaces uint32, dst []Record) ([]Record, error) {
	it := b.Iter(numIfaces)
	dst = dst[:0]
	var r Record
	for {
		if err := it.Next(&r); err != nil {
			if err == io.EOF {
				return dst, nil
			}
			return dst[:0], err
		}
		dst = append(dst, r)
	}
}

// RecordIter walks a batch's records. The zero value yields nothing.
type RecordIter struct {
	err  error  // set: Next returns it
	data []byte // the records' data, back to back
	meta []byte // the records' metadata
	doff int    // next record's data in data
	moff int    // next record's metadata in meta
	prev int64
	left uint32
	nIf  uint32
	seq  uint64
	idx  uint32
}

// Next decodes the next record into r. It returns io.EOF after the last
// record, and an error if the bytes are malformed, including bytes left
// over after the last record. Steady state allocates nothing.
func (it *RecordIter) Next(r *Record) error {
	if it.err != nil {
		return it.err
	}
	if it.left == 0 {
		if it.moff != len(it.meta) {
			return it.fail("%d metadata bytes after the last record: %w", len(it.meta)-it.moff, ErrMalformed)
		}
		if it.doff != len(it.data) {
			return it.fail("%d data bytes after the last record: %w", len(it.data)-it.doff, ErrMalformed)
		}
		return io.EOF
	}
	m, off := it.meta, it.moff
	var h *[RecordMaxOverhead]byte
	if off+RecordMaxOverhead <= cap(m) {
		h = (*[RecordMaxOverhead]byte)(m[off : off+RecordMaxOverhead])
	} else {
		// Near the end of the buffer: read from a zero-padded copy.
		var pad [RecordMaxOverhead]byte
		copy(pad[:], m[off:])
		h = &pad
	}
	zz, ifx32, capLen32, extra32, n, ok := getMeta(h)
	if !ok {
		return it.fail("tag 0x%02x: timestamp delta of %d bytes: %w", h[0], h[0]&15, ErrMalformed)
	}
	if off+n > len(m) {
		return it.fail("metadata of %d bytes, %d left: %w", n, len(m)-off, ErrTruncated)
	}
	off += n
	ifx, capLen, extra := uint64(ifx32), uint64(capLen32), uint64(extra32)
	if ifx >= uint64(it.nIf) {
		return it.fail("interface index %d, %d declared: %w", ifx, it.nIf, ErrMalformed)
	}
	if capLen > uint64(len(it.data)-it.doff) {
		return it.fail("captured length %d, %d data bytes left: %w", capLen, len(it.data)-it.doff, ErrTruncated)
	}
	if capLen+extra > 1<<32-1 {
		return it.fail("original length %d over 2^32-1: %w", capLen+extra, ErrMalformed)
	}
	it.moff = off
	it.prev += int64(zz>>1) ^ -int64(zz&1)
	start := it.doff
	end := start + int(capLen)
	r.Timestamp = it.prev
	r.IfIndex = uint32(ifx)
	r.OrigLen = uint32(capLen + extra)
	r.Data = it.data[start:end:end]
	it.doff = end
	it.left--
	it.idx++
	return nil
}

func (it *RecordIter) fail(format string, args ...any) error {
	it.left = 0
	it.moff, it.doff = len(it.meta), len(it.data)
	return fmt.Errorf("batch seq %d: record %d: "+format, append([]any{it.seq, it.idx}, args...)...)
}
