package wirecompare

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
)

// jsonRecordMeta is Record without Data: encoding/json still scans the
// data string but does not decode it.
type jsonRecordMeta struct {
	Timestamp int64
	IfIndex   uint32
	OrigLen   uint32
}

type jsonBatchMeta struct {
	Source  uint32
	Records []jsonRecordMeta
}

func (b *jsonBatchMeta) meta() Meta {
	m := Meta{Source: b.Source}
	for _, r := range b.Records {
		m.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
	return m
}

// jsonCodec is encoding/json on Batch as it is (field names as keys,
// data base64): what a Go program gets without trying. AppendEncode
// reuses the codec's own bytes.Buffer and Encoder (the reference's
// "reused buffer"); DecodePooled reuses the destination, which keeps
// the records slice (encoding/json allocates every []byte anew).
type jsonCodec struct {
	b      *Batch
	bb     bytes.Buffer
	enc    *json.Encoder // on bb
	w      io.Writer
	wenc   *json.Encoder // on w
	meta   jsonBatchMeta
	pooled Batch
}

func (*jsonCodec) Name() string { return "encoding-json" }

func (c *jsonCodec) Load(b *Batch) {
	c.b = b
	c.enc = json.NewEncoder(&c.bb)
}

func (c *jsonCodec) Encode() ([]byte, error) { return json.Marshal(c.b) }

func (c *jsonCodec) AppendEncode([]byte) ([]byte, error) {
	c.bb.Reset()
	err := c.enc.Encode(c.b)
	return c.bb.Bytes(), err
}

func (c *jsonCodec) EncodeTo(w io.Writer) error {
	if c.w != w {
		c.wenc, c.w = json.NewEncoder(w), w
	}
	return c.wenc.Encode(c.b)
}

func (c *jsonCodec) Decode(p []byte) (any, error) {
	b := new(Batch)
	return b, json.Unmarshal(p, b)
}

func (c *jsonCodec) DecodeMeta(p []byte) (Meta, error) {
	c.meta.Records = c.meta.Records[:0]
	err := json.Unmarshal(p, &c.meta)
	return c.meta.meta(), err
}

// DecodeView: JSON carries data as base64, which must be decoded into
// new bytes.
func (c *jsonCodec) DecodeView([]byte) (any, error) { return nil, ErrUnsupported }

func (c *jsonCodec) DecodePooled(p []byte) (any, error) {
	return &c.pooled, json.Unmarshal(p, &c.pooled)
}

func (*jsonCodec) Batch(v any) Batch { return *v.(*Batch) }

// jsonGzipCodec is encoding/json compressed with compress/gzip at the
// default level, the reference's "JSON + compression". Encode makes a
// new gzip.Writer each time, as a caller who keeps nothing does; the
// other operations reset one writer or reader.
type jsonGzipCodec struct {
	jsonCodec
	zb   bytes.Buffer // compressed output of AppendEncode
	zw   *gzip.Writer
	zenc *json.Encoder // on zw
	zr   gzip.Reader
	br   bytes.Reader
	raw  bytes.Buffer // decompressed input of DecodeMeta and DecodePooled
}

func (*jsonGzipCodec) Name() string { return "json+gzip" }

func (c *jsonGzipCodec) Load(b *Batch) {
	c.jsonCodec.Load(b)
	c.zw = gzip.NewWriter(io.Discard)
	c.zenc = json.NewEncoder(c.zw)
}

func (c *jsonGzipCodec) Encode() ([]byte, error) {
	j, err := json.Marshal(c.b)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	if _, err := zw.Write(j); err != nil {
		return nil, err
	}
	err = zw.Close()
	return out.Bytes(), err
}

func (c *jsonGzipCodec) AppendEncode([]byte) ([]byte, error) {
	c.zb.Reset()
	err := c.EncodeTo(&c.zb)
	return c.zb.Bytes(), err
}

func (c *jsonGzipCodec) EncodeTo(w io.Writer) error {
	c.zw.Reset(w)
	if err := c.zenc.Encode(c.b); err != nil {
		return err
	}
	return c.zw.Close()
}

func (c *jsonGzipCodec) Decode(p []byte) (any, error) {
	zr, err := gzip.NewReader(bytes.NewReader(p))
	if err != nil {
		return nil, err
	}
	j, err := io.ReadAll(zr)
	if err != nil {
		return nil, err
	}
	return c.jsonCodec.Decode(j)
}

// inflate decompresses p into c.raw with the reused reader.
func (c *jsonGzipCodec) inflate(p []byte) ([]byte, error) {
	c.br.Reset(p)
	if err := c.zr.Reset(&c.br); err != nil {
		return nil, err
	}
	c.raw.Reset()
	_, err := c.raw.ReadFrom(&c.zr)
	return c.raw.Bytes(), err
}

func (c *jsonGzipCodec) DecodeMeta(p []byte) (Meta, error) {
	j, err := c.inflate(p)
	if err != nil {
		return Meta{}, err
	}
	return c.jsonCodec.DecodeMeta(j)
}

func (c *jsonGzipCodec) DecodeView([]byte) (any, error) { return nil, ErrUnsupported }

func (c *jsonGzipCodec) DecodePooled(p []byte) (any, error) {
	j, err := c.inflate(p)
	if err != nil {
		return nil, err
	}
	return c.jsonCodec.DecodePooled(j)
}
