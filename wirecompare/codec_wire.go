package wirecompare

import (
	"fmt"
	"io"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// wireCodec is pcapsync's own format: one batch frame (8-byte frame
// header, 28-byte batch header, records section), as the agent sends it.
// The source is not in the frame: the agent names itself once per
// connection in its hello, so the codec keeps it aside. With crc the
// batch carries its CRC-32C, as agents send it over plain TCP and UDP
// (and as Redis entries store it); without, it is the batch as sent
// inside TLS, whose AEAD authenticates it (wire.FlagUnchecked).
type wireCodec struct {
	crc    bool
	b      *Batch
	nIf    uint32
	enc    wire.BatchEncoder
	buf    []byte   // EncodeTo's frame buffer
	recs   []Record // DecodePooled's and DecodeView's records
	arena  []byte   // DecodePooled's packet data
	pooled Batch
}

func (c *wireCodec) Name() string {
	if c.crc {
		return "wire+crc32c"
	}
	return "wire"
}

func (c *wireCodec) Load(b *Batch) {
	c.b = b
	c.enc.Unchecked = !c.crc
	c.nIf = 1
	for _, r := range b.Records {
		c.nIf = max(c.nIf, r.IfIndex+1)
	}
}

func (c *wireCodec) encode(dst []byte) []byte {
	c.enc.Reset(dst)
	for i := range c.b.Records {
		r := &c.b.Records[i]
		c.enc.Append(r.Timestamp, r.IfIndex, r.OrigLen, r.Data)
	}
	return c.enc.Finish(1)
}

// Encode allocates the frame once, sized as BatchEncoder's doc says:
// headers, plus RecordMaxOverhead and the data for each record.
func (c *wireCodec) Encode() ([]byte, error) {
	n := wire.HeaderSize + wire.BatchHeaderSize + len(c.b.Records)*wire.RecordMaxOverhead + c.b.DataBytes()
	return c.encode(make([]byte, 0, n)), nil
}

func (c *wireCodec) AppendEncode(dst []byte) ([]byte, error) { return c.encode(dst), nil }

func (c *wireCodec) EncodeTo(w io.Writer) error {
	c.buf = c.encode(c.buf)
	_, err := w.Write(c.buf)
	return err
}

// parse checks the frame header and the batch (checksum included) and
// returns an iterator over its records.
func (c *wireCodec) parse(p []byte) (wire.Batch, wire.RecordIter, error) {
	if len(p) < wire.HeaderSize {
		return wire.Batch{}, wire.RecordIter{}, fmt.Errorf("frame of %d bytes: %w", len(p), wire.ErrTruncated)
	}
	h, err := wire.ParseHeader((*[wire.HeaderSize]byte)(p), wire.Limits{})
	if err != nil {
		return wire.Batch{}, wire.RecordIter{}, err
	}
	if h.Type != wire.TypeBatch || int(h.Length) != len(p)-wire.HeaderSize {
		return wire.Batch{}, wire.RecordIter{}, fmt.Errorf("%s frame of %d bytes: %w", h.Type, h.Length, wire.ErrMalformed)
	}
	b, err := wire.ParseBatch(h.Flags, p[wire.HeaderSize:], wire.BatchLimits{Unchecked: !c.crc})
	if err != nil {
		return b, wire.RecordIter{}, err
	}
	return b, b.Iter(c.nIf), nil
}

// decodeInto appends the records of frame p to recs. With arena their
// data is copied into *arena (grown once to the records section's
// size); without, it aliases p.
func (c *wireCodec) decodeInto(p []byte, recs []Record, arena *[]byte) ([]Record, error) {
	b, it, err := c.parse(p)
	if err != nil {
		return recs, err
	}
	if cap(recs) < int(b.Count) {
		recs = make([]Record, 0, b.Count)
	}
	if arena != nil && cap(*arena) < len(b.Records) {
		*arena = make([]byte, 0, len(b.Records))
	}
	var r wire.Record
	for {
		if err := it.Next(&r); err != nil {
			if err == io.EOF {
				return recs, nil
			}
			return recs, err
		}
		if arena != nil {
			n := len(*arena)
			*arena = append(*arena, r.Data...)
			r.Data = (*arena)[n:len(*arena):len(*arena)]
		}
		recs = append(recs, Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data})
	}
}

// Decode copies all packet data into one new buffer: two allocations
// per batch, the records and the data.
func (c *wireCodec) Decode(p []byte) (any, error) {
	var arena []byte
	recs, err := c.decodeInto(p, nil, &arena)
	return &Batch{Source: c.b.Source, Records: recs}, err
}

func (c *wireCodec) DecodeMeta(p []byte) (Meta, error) {
	m := Meta{Source: c.b.Source}
	_, it, err := c.parse(p)
	if err != nil {
		return m, err
	}
	var r wire.Record
	for {
		if err := it.Next(&r); err != nil {
			if err == io.EOF {
				return m, nil
			}
			return m, err
		}
		m.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
}

func (c *wireCodec) DecodePooled(p []byte) (any, error) {
	var err error
	c.arena = c.arena[:0]
	c.recs, err = c.decodeInto(p, c.recs[:0], &c.arena)
	c.pooled = Batch{Source: c.b.Source, Records: c.recs}
	return &c.pooled, err
}

// DecodeView is the record iterator into the kept record slice, the
// records' data aliasing the frame: how the collector reads a batch.
func (c *wireCodec) DecodeView(p []byte) (any, error) {
	var err error
	c.recs, err = c.decodeInto(p, c.recs[:0], nil)
	c.pooled = Batch{Source: c.b.Source, Records: c.recs}
	return &c.pooled, err
}

func (*wireCodec) Batch(v any) Batch { return *v.(*Batch) }
