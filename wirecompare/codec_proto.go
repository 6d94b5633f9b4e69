package wirecompare

import (
	"io"

	"google.golang.org/protobuf/proto"

	gogopb "github.com/pcapsync/pcapsync/wirecompare/gogopb"
	"github.com/pcapsync/pcapsync/wirecompare/pb"
)

// protoCodec is protobuf with google.golang.org/protobuf's generated
// code (reflection-driven marshalling). It has no streaming encoder:
// EncodeTo marshals into a reused buffer and writes it. It has no way to
// reuse decoded messages either: DecodePooled is unsupported.
type protoCodec struct {
	m   *pb.Batch
	buf []byte
}

func (*protoCodec) Name() string { return "protobuf-go" }

func (c *protoCodec) Load(b *Batch) { c.m = toPB(b) }

func toPB(b *Batch) *pb.Batch {
	return &pb.Batch{Source: b.Source, Records: mapSlice(b.Records, func(r Record) *pb.Record {
		return &pb.Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}

func fromPB(m *pb.Batch) Batch {
	return Batch{Source: m.Source, Records: mapSlice(m.Records, func(r *pb.Record) Record {
		return Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}

func (c *protoCodec) Encode() ([]byte, error) { return proto.Marshal(c.m) }

func (c *protoCodec) AppendEncode(dst []byte) ([]byte, error) {
	return proto.MarshalOptions{}.MarshalAppend(dst[:0], c.m)
}

func (c *protoCodec) EncodeTo(w io.Writer) error {
	return writeVia(w, &c.buf, c)
}

func (c *protoCodec) Decode(p []byte) (any, error) {
	m := new(pb.Batch)
	return m, proto.Unmarshal(p, m)
}

// DecodeMeta decodes into BatchMeta, whose records lack the data field,
// discarding unknown fields (else the data would be copied into them).
func (c *protoCodec) DecodeMeta(p []byte) (Meta, error) {
	var m pb.BatchMeta
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(p, &m); err != nil {
		return Meta{}, err
	}
	meta := Meta{Source: m.Source}
	for _, r := range m.Records {
		meta.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
	return meta, nil
}

func (c *protoCodec) DecodePooled([]byte) (any, error) { return nil, ErrUnsupported }

func (c *protoCodec) DecodeView([]byte) (any, error) { return nil, ErrUnsupported }

func (*protoCodec) Batch(v any) Batch { return fromPB(v.(*pb.Batch)) }

// vtprotoCodec is the same messages with planetscale/vtprotobuf's
// generated marshalling code (features marshal, unmarshal,
// unmarshal_unsafe, size and pool).
type vtprotoCodec struct {
	m    *pb.Batch
	buf  []byte
	meta *pb.Batch
	pool *pb.Batch
	view *pb.Batch
}

func (*vtprotoCodec) Name() string { return "vtprotobuf" }

func (c *vtprotoCodec) Load(b *Batch) { c.m = toPB(b) }

func (c *vtprotoCodec) Encode() ([]byte, error) { return c.m.MarshalVT() }

func (c *vtprotoCodec) AppendEncode(dst []byte) ([]byte, error) {
	n := c.m.SizeVT()
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	_, err := c.m.MarshalToSizedBufferVT(dst)
	return dst, err
}

func (c *vtprotoCodec) EncodeTo(w io.Writer) error {
	return writeVia(w, &c.buf, c)
}

func (c *vtprotoCodec) Decode(p []byte) (any, error) {
	m := new(pb.Batch)
	return m, m.UnmarshalVT(p)
}

// DecodeMeta unmarshals with UnmarshalVTUnsafe (data aliases p, nothing
// copied) into one reused message.
func (c *vtprotoCodec) DecodeMeta(p []byte) (Meta, error) {
	if c.meta == nil {
		c.meta = new(pb.Batch)
	}
	c.meta.ResetVT()
	if err := c.meta.UnmarshalVTUnsafe(p); err != nil {
		return Meta{}, err
	}
	meta := Meta{Source: c.meta.Source}
	for _, r := range c.meta.Records {
		meta.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
	return meta, nil
}

// DecodePooled takes a message from vtprotobuf's pool (ResetVT keeps
// the records and their data buffers) and returns the previous one.
func (c *vtprotoCodec) DecodePooled(p []byte) (any, error) {
	c.pool.ReturnToVTPool()
	c.pool = pb.BatchFromVTPool()
	return c.pool, c.pool.UnmarshalVT(p)
}

// DecodeView is UnmarshalVTUnsafe into one reused message (ResetVT
// keeps its records): data aliases p.
func (c *vtprotoCodec) DecodeView(p []byte) (any, error) {
	if c.view == nil {
		c.view = new(pb.Batch)
	}
	c.view.ResetVT()
	return c.view, c.view.UnmarshalVTUnsafe(p)
}

func (*vtprotoCodec) Batch(v any) Batch { return fromPB(v.(*pb.Batch)) }

// gogoCodec is the same .proto with gogo/protobuf's protoc-gen-gogofaster
// (unmaintained since 2021; kept for the historical row). Its generated
// Unmarshal allocates every record anew, so DecodePooled is unsupported.
type gogoCodec struct {
	m   *gogopb.Batch
	buf []byte
}

func (*gogoCodec) Name() string { return "gogo-protobuf" }

func (c *gogoCodec) Load(b *Batch) {
	c.m = &gogopb.Batch{Source: b.Source, Records: mapSlice(b.Records, func(r Record) *gogopb.Record {
		return &gogopb.Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}

func (c *gogoCodec) Encode() ([]byte, error) { return c.m.Marshal() }

func (c *gogoCodec) AppendEncode(dst []byte) ([]byte, error) {
	n := c.m.Size()
	if cap(dst) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	_, err := c.m.MarshalToSizedBuffer(dst)
	return dst, err
}

func (c *gogoCodec) EncodeTo(w io.Writer) error {
	return writeVia(w, &c.buf, c)
}

func (c *gogoCodec) Decode(p []byte) (any, error) {
	m := new(gogopb.Batch)
	return m, m.Unmarshal(p)
}

// DecodeMeta decodes into BatchMeta; gogofaster skips the unknown data
// field without keeping it.
func (c *gogoCodec) DecodeMeta(p []byte) (Meta, error) {
	var m gogopb.BatchMeta
	if err := m.Unmarshal(p); err != nil {
		return Meta{}, err
	}
	meta := Meta{Source: m.Source}
	for _, r := range m.Records {
		meta.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
	return meta, nil
}

func (c *gogoCodec) DecodePooled([]byte) (any, error) { return nil, ErrUnsupported }

func (c *gogoCodec) DecodeView([]byte) (any, error) { return nil, ErrUnsupported }

func (*gogoCodec) Batch(v any) Batch {
	m := v.(*gogopb.Batch)
	return Batch{Source: m.Source, Records: mapSlice(m.Records, func(r *gogopb.Record) Record {
		return Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}
