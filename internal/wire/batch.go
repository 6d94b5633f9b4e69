package wire

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
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
// before anything is decompressed or written.
//
// Each record, fields as unsigned LEB128 varints:
//
//	+-----------+---------+--------+-----------------+----------------+
//	| ts delta  | ifindex | caplen | origlen-caplen  | data [caplen]  |
//	+-----------+---------+--------+-----------------+----------------+
//
// ts delta is the zigzag-encoded difference from the previous record's
// timestamp (the first record's from base time), so records need not be
// in time order. What repeats (sequence, source, base time) lives once in
// the batch header; a typical record spends 5-7 bytes on metadata
// against the 22 of a fixed layout.
const BatchHeaderSize = 28

// RecordMaxOverhead is the most metadata bytes one record can take: four
// varints of at most 10, 5, 5 and 5 bytes.
const RecordMaxOverhead = 25

// minRecord is the smallest possible record (four one-byte varints, no
// data); it bounds count before any work is done.
const minRecord = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var zeroHeaders [HeaderSize + BatchHeaderSize]byte

// BatchEncoder builds one batch frame in a caller's buffer. The zero
// value is not ready: call Reset first. Not safe for concurrent use.
type BatchEncoder struct {
	buf   []byte
	count uint32
	base  int64
	prev  int64
}

// Reset starts a new batch in dst[:0], reusing its capacity.
func (e *BatchEncoder) Reset(dst []byte) {
	e.buf = append(dst[:0], zeroHeaders[:]...)
	e.count = 0
}

// Len returns the size of the frame so far, headers included.
func (e *BatchEncoder) Len() int { return len(e.buf) }

// Count returns the number of records appended since Reset.
func (e *BatchEncoder) Count() int { return int(e.count) }

// Append adds one record. ts is Unix nanoseconds; origLen below
// len(data) is raised to len(data). It allocates only when the buffer
// must grow; size the buffer for the batch limit plus RecordMaxOverhead
// plus the largest packet and it never does.
func (e *BatchEncoder) Append(ts int64, ifIndex, origLen uint32, data []byte) {
	if e.count == 0 {
		e.base, e.prev = ts, ts
	}
	d := ts - e.prev
	e.prev = ts
	capLen := uint32(len(data))
	if origLen < capLen {
		origLen = capLen
	}
	b := binary.AppendUvarint(e.buf, uint64(d<<1)^uint64(d>>63))
	b = binary.AppendUvarint(b, uint64(ifIndex))
	b = binary.AppendUvarint(b, uint64(capLen))
	b = binary.AppendUvarint(b, uint64(origLen-capLen))
	e.buf = append(b, data...)
	e.count++
}

// Finish completes the frame with sequence number seq and returns it:
// frame header, batch header and records, ready to write. The returned
// slice aliases the encoder's buffer and is valid until the next Reset.
func (e *BatchEncoder) Finish(seq uint64) []byte {
	return finish(e.buf, seq, e.base, e.count, uint32(len(e.Records())), CodecNone)
}

// batchCRC is the checksum of batch payload p: bytes 0..24 and the
// records section, skipping the checksum field itself.
func batchCRC(p []byte) uint32 {
	return crc32.Update(crc32.Checksum(p[:24], castagnoli), castagnoli, p[BatchHeaderSize:])
}

// Records returns the records section appended since Reset, for a
// caller that compresses it (see FinishCompressed). It aliases the
// encoder's buffer.
func (e *BatchEncoder) Records() []byte { return e.buf[HeaderSize+BatchHeaderSize:] }

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
	return finish(frame, seq, e.base, e.count, uint32(len(e.Records())), codec)
}

// FinishFrame completes frame, which holds the headers' room (see
// CompressedFrame) followed by b's records section as sent with codec
// (b.Records as they are for CodecNone, or compressed), as a batch frame
// with b's sequence number, base time, count and RawLen, the checksum
// over the records as sent. It returns frame with the headers filled in.
// It re-frames a batch that was parsed (and perhaps decompressed), for
// a consumer that passes it on (the collector's Redis feed).
func (b *Batch) FinishFrame(frame []byte, codec Codec) []byte {
	return finish(frame, b.Seq, b.BaseTime, b.Count, b.RawLen, codec)
}

func finish(b []byte, seq uint64, base int64, count, rawLen uint32, codec Codec) []byte {
	AppendHeader(b[:0], TypeBatch, uint8(codec), uint32(len(b)-HeaderSize))
	p := b[HeaderSize:]
	binary.LittleEndian.PutUint64(p[0:], seq)
	binary.LittleEndian.PutUint64(p[8:], uint64(base))
	binary.LittleEndian.PutUint32(p[16:], count)
	binary.LittleEndian.PutUint32(p[20:], rawLen)
	binary.LittleEndian.PutUint32(p[24:], batchCRC(p))
	return b
}

// Batch is a decoded batch header. Records aliases the frame payload; it
// is compressed with Codec unless that is CodecNone. A transport that
// decompresses it sets Records to the result and Codec to CodecNone.
type Batch struct {
	Seq      uint64
	BaseTime int64
	Count    uint32
	Codec    Codec
	RawLen   uint32 // length of the records section uncompressed
	Records  []byte
}

// BatchLimits bounds a batch beyond the frame limit. Zero means default.
type BatchLimits struct {
	// MaxRecords caps the record count of one batch. 0 means 1<<20.
	MaxRecords uint32
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
	if flags&0xf0 != 0 {
		return b, fmt.Errorf("batch seq %d: flags 0x%02x: %w", b.Seq, flags, ErrFlags)
	}
	b.Records = p[BatchHeaderSize:len(p):len(p)]
	if got := batchCRC(p); got != want {
		return b, fmt.Errorf("batch seq %d: crc32c 0x%08x, header says 0x%08x: %w", b.Seq, got, want, ErrChecksum)
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
	if uint64(b.Count)*minRecord > uint64(b.RawLen) {
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
	return RecordIter{b: b.Records, prev: b.BaseTime, left: b.Count, nIf: numIfaces, seq: b.Seq}
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

// RecordIter walks a batch's records. The zero value yields nothing.
type RecordIter struct {
	err  error // set: Next returns it
	b    []byte
	off  int
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
		if it.off != len(it.b) {
			return it.fail("%d bytes after the last record: %w", len(it.b)-it.off, ErrMalformed)
		}
		return io.EOF
	}
	zz, ok := it.uvarint()
	if !ok {
		return it.fail("timestamp: %w", ErrTruncated)
	}
	ifx, ok := it.uvarint()
	if !ok {
		return it.fail("interface: %w", ErrTruncated)
	}
	capLen, ok := it.uvarint()
	if !ok {
		return it.fail("captured length: %w", ErrTruncated)
	}
	extra, ok := it.uvarint()
	if !ok {
		return it.fail("original length: %w", ErrTruncated)
	}
	if ifx >= uint64(it.nIf) {
		return it.fail("interface index %d, %d declared: %w", ifx, it.nIf, ErrMalformed)
	}
	if capLen > uint64(len(it.b)-it.off) {
		return it.fail("captured length %d, %d bytes left: %w", capLen, len(it.b)-it.off, ErrTruncated)
	}
	if capLen+extra > 1<<32-1 {
		return it.fail("original length %d over 2^32-1: %w", capLen+extra, ErrMalformed)
	}
	it.prev += int64(zz>>1) ^ -int64(zz&1)
	end := it.off + int(capLen)
	r.Timestamp = it.prev
	r.IfIndex = uint32(ifx)
	r.OrigLen = uint32(capLen + extra)
	r.Data = it.b[it.off:end:end]
	it.off = end
	it.left--
	it.idx++
	return nil
}

func (it *RecordIter) uvarint() (uint64, bool) {
	if it.off < len(it.b) && it.b[it.off] < 0x80 {
		v := uint64(it.b[it.off])
		it.off++
		return v, true
	}
	v, n := binary.Uvarint(it.b[it.off:])
	if n <= 0 {
		return 0, false
	}
	it.off += n
	return v, true
}

func (it *RecordIter) fail(format string, args ...any) error {
	it.left = 0
	it.off = len(it.b)
	return fmt.Errorf("batch seq %d: record %d: "+format, append([]any{it.seq, it.idx}, args...)...)
}
