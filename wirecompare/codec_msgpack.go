package wirecompare

import (
	"bytes"
	"fmt"
	"io"

	"github.com/tinylib/msgp/msgp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/pcapsync/pcapsync/wirecompare/msgpgen"
)

// msgpCodec is MessagePack with tinylib/msgp's generated code, records
// as tuples (arrays, no keys), the most compact form msgp has.
type msgpCodec struct {
	m      *msgpgen.Batch
	w      io.Writer
	mw     *msgp.Writer
	pooled msgpgen.Batch
	view   msgpgen.ViewBatch
}

func (*msgpCodec) Name() string { return "tinylib-msgp" }

func (c *msgpCodec) Load(b *Batch) {
	c.m = &msgpgen.Batch{Source: b.Source, Records: mapSlice(b.Records, func(r Record) msgpgen.Record {
		return msgpgen.Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}

func (c *msgpCodec) Encode() ([]byte, error) { return c.m.MarshalMsg(nil) }

func (c *msgpCodec) AppendEncode(dst []byte) ([]byte, error) { return c.m.MarshalMsg(dst[:0]) }

// EncodeTo goes through a msgp.Writer (a 2 KiB buffer), reset for each
// new w.
func (c *msgpCodec) EncodeTo(w io.Writer) error {
	if c.mw == nil {
		c.mw = msgp.NewWriter(w)
	} else if c.w != w {
		c.mw.Reset(w)
	}
	c.w = w
	if err := c.m.EncodeMsg(c.mw); err != nil {
		return err
	}
	return c.mw.Flush()
}

func (c *msgpCodec) Decode(p []byte) (any, error) {
	m := new(msgpgen.Batch)
	_, err := m.UnmarshalMsg(p)
	return m, err
}

// DecodeMeta walks the message with msgp's zero-copy readers: the
// generated tuple decoder insists on every field, so there is no
// data-less type to decode into.
func (c *msgpCodec) DecodeMeta(p []byte) (Meta, error) {
	var m Meta
	n, p, err := msgp.ReadMapHeaderBytes(p)
	if err != nil {
		return m, err
	}
	for range n {
		var key []byte
		if key, p, err = msgp.ReadMapKeyZC(p); err != nil {
			return m, err
		}
		switch string(key) {
		case "src":
			m.Source, p, err = msgp.ReadUint32Bytes(p)
		case "recs":
			p, err = msgpRecordsMeta(p, &m)
		default:
			p, err = msgp.Skip(p)
		}
		if err != nil {
			return m, err
		}
	}
	return m, nil
}

func msgpRecordsMeta(p []byte, m *Meta) ([]byte, error) {
	n, p, err := msgp.ReadArrayHeaderBytes(p)
	if err != nil {
		return p, err
	}
	for range n {
		var fields uint32
		if fields, p, err = msgp.ReadArrayHeaderBytes(p); err != nil {
			return p, err
		}
		if fields != 4 {
			return p, fmt.Errorf("record of %d fields, want 4", fields)
		}
		var ts int64
		var ifx, orig uint32
		if ts, p, err = msgp.ReadInt64Bytes(p); err != nil {
			return p, err
		}
		if ifx, p, err = msgp.ReadUint32Bytes(p); err != nil {
			return p, err
		}
		if orig, p, err = msgp.ReadUint32Bytes(p); err != nil {
			return p, err
		}
		if _, p, err = msgp.ReadBytesZC(p); err != nil {
			return p, err
		}
		m.add(ts, ifx, orig)
	}
	return p, nil
}

// DecodePooled unmarshals into one reused Batch: msgp's generated code
// keeps the records slice and each record's data buffer.
func (c *msgpCodec) DecodePooled(p []byte) (any, error) {
	_, err := c.pooled.UnmarshalMsg(p)
	return &c.pooled, err
}

// DecodeView unmarshals into one reused ViewBatch, whose data field is
// generated with msgp's zerocopy option: data aliases p.
func (c *msgpCodec) DecodeView(p []byte) (any, error) {
	_, err := c.view.UnmarshalMsg(p)
	return &c.view, err
}

func (*msgpCodec) Batch(v any) Batch {
	if m, ok := v.(*msgpgen.ViewBatch); ok {
		return Batch{Source: m.Source, Records: mapSlice(m.Records, func(r msgpgen.ViewRecord) Record {
			return Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
		})}
	}
	m := v.(*msgpgen.Batch)
	return Batch{Source: m.Source, Records: mapSlice(m.Records, func(r msgpgen.Record) Record {
		return Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}

// mpRecord is Record for vmihailenco/msgpack, encoded as an array (no
// keys), its most compact form.
type mpRecord struct {
	_msgpack  struct{} `msgpack:",as_array"`
	Timestamp int64
	IfIndex   uint32
	OrigLen   uint32
	Data      []byte
}

type mpBatch struct {
	Source  uint32     `msgpack:"src"`
	Records []mpRecord `msgpack:"recs"`
}

// msgpackCodec is MessagePack with vmihailenco/msgpack (reflection).
// AppendEncode reuses the codec's own bytes.Buffer, the library's way.
type msgpackCodec struct {
	m      *mpBatch
	bb     bytes.Buffer
	enc    *msgpack.Encoder // on bb
	w      io.Writer
	wenc   *msgpack.Encoder // on w
	br     bytes.Reader
	dec    *msgpack.Decoder
	pooled mpBatch
}

func (*msgpackCodec) Name() string { return "vmihailenco-msgpack" }

func (c *msgpackCodec) Load(b *Batch) {
	c.m = &mpBatch{Source: b.Source, Records: mapSlice(b.Records, func(r Record) mpRecord {
		return mpRecord{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
	c.enc = msgpack.NewEncoder(&c.bb)
	c.dec = msgpack.NewDecoder(&c.br)
}

func (c *msgpackCodec) Encode() ([]byte, error) { return msgpack.Marshal(c.m) }

func (c *msgpackCodec) AppendEncode([]byte) ([]byte, error) {
	c.bb.Reset()
	err := c.enc.Encode(c.m)
	return c.bb.Bytes(), err
}

func (c *msgpackCodec) EncodeTo(w io.Writer) error {
	if c.wenc == nil {
		c.wenc = msgpack.NewEncoder(w)
	} else if c.w != w {
		c.wenc.Reset(w)
	}
	c.w = w
	return c.wenc.Encode(c.m)
}

func (c *msgpackCodec) Decode(p []byte) (any, error) {
	m := new(mpBatch)
	return m, msgpack.Unmarshal(p, m)
}

// DecodeMeta walks the message with the Decoder's low-level calls,
// skipping the data: decoding into a data-less as_array struct fails
// ("number of fields in array-encoded struct has changed").
func (c *msgpackCodec) DecodeMeta(p []byte) (Meta, error) {
	var m Meta
	c.br.Reset(p)
	n, err := c.dec.DecodeMapLen()
	if err != nil {
		return m, err
	}
	for range n {
		key, err := c.dec.DecodeString()
		if err != nil {
			return m, err
		}
		switch key {
		case "src":
			m.Source, err = c.dec.DecodeUint32()
		case "recs":
			err = c.recordsMeta(&m)
		default:
			err = c.dec.Skip()
		}
		if err != nil {
			return m, err
		}
	}
	return m, nil
}

func (c *msgpackCodec) recordsMeta(m *Meta) error {
	n, err := c.dec.DecodeArrayLen()
	if err != nil {
		return err
	}
	for range n {
		fields, err := c.dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		if fields != 4 {
			return fmt.Errorf("record of %d fields, want 4", fields)
		}
		ts, err := c.dec.DecodeInt64()
		if err != nil {
			return err
		}
		ifx, err := c.dec.DecodeUint32()
		if err != nil {
			return err
		}
		orig, err := c.dec.DecodeUint32()
		if err != nil {
			return err
		}
		if err := c.dec.Skip(); err != nil {
			return err
		}
		m.add(ts, ifx, orig)
	}
	return nil
}

// DecodePooled decodes with one reused Decoder into one reused value.
func (c *msgpackCodec) DecodeView([]byte) (any, error) { return nil, ErrUnsupported }

func (c *msgpackCodec) DecodePooled(p []byte) (any, error) {
	c.br.Reset(p)
	return &c.pooled, c.dec.Decode(&c.pooled)
}

func (*msgpackCodec) Batch(v any) Batch {
	m := v.(*mpBatch)
	return Batch{Source: m.Source, Records: mapSlice(m.Records, func(r mpRecord) Record {
		return Record{Timestamp: r.Timestamp, IfIndex: r.IfIndex, OrigLen: r.OrigLen, Data: r.Data}
	})}
}
