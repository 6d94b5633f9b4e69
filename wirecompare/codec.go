package wirecompare

import (
	"errors"
	"io"
)

// Codec is one encoding of Batch under test. Load converts a batch into
// the codec's own types once, before any timing, so that encoding
// measures the library and not a conversion; decoding produces the
// codec's own types, which Batch converts back for the round-trip tests.
// A Codec keeps reusable state (buffers, encoders): not safe for
// concurrent use.
type Codec interface {
	// Name is the codec's name in benchmark names and the report.
	Name() string
	Load(b *Batch)
	// Encode returns the loaded batch in a new buffer: what a caller
	// gets who keeps nothing between calls.
	Encode() ([]byte, error)
	// AppendEncode encodes into dst[:0], reusing its capacity (or the
	// library's nearest equivalent, such as a reset bytes.Buffer).
	AppendEncode(dst []byte) ([]byte, error)
	// EncodeTo writes the encoding to w, through whatever streaming API
	// the library has, reusing its encoder across calls.
	EncodeTo(w io.Writer) error
	// Decode returns a decoded batch that owns its memory: nothing
	// aliases p.
	Decode(p []byte) (any, error)
	// DecodeMeta reads every record's metadata without copying data.
	DecodeMeta(p []byte) (Meta, error)
	// DecodePooled decodes into memory the codec reuses from call to
	// call (pooled buffers, reset messages); the result is valid until
	// the next call. ErrUnsupported when the library has no way.
	DecodePooled(p []byte) (any, error)
	// DecodeView decodes every record with its packet data aliasing p
	// (nothing copied; valid while p is, and until the next call): the
	// library's zero-copy decode. ErrUnsupported when it has none.
	DecodeView(p []byte) (any, error)
	// Batch converts what Decode, DecodePooled or DecodeView returned.
	Batch(v any) Batch
}

// ErrUnsupported is returned by codecs for operations their library
// does not offer; benchmarks skip them and the report shows "—".
var ErrUnsupported = errors.New("not supported by this library")

// Meta sums what DecodeMeta reads, so that the work cannot be skipped
// and tests can check it.
type Meta struct {
	Source  uint32
	Records int
	TimeSum int64
	IfSum   uint64
	OrigSum uint64
}

func (m *Meta) add(ts int64, ifx, orig uint32) {
	m.Records++
	m.TimeSum += ts
	m.IfSum += uint64(ifx)
	m.OrigSum += uint64(orig)
}

// MetaOf is the Meta of b, for checking DecodeMeta.
func MetaOf(b *Batch) Meta {
	m := Meta{Source: b.Source}
	for _, r := range b.Records {
		m.add(r.Timestamp, r.IfIndex, r.OrigLen)
	}
	return m
}

// Codecs returns a new instance of every codec, in report order.
func Codecs() []Codec {
	return []Codec{
		&wireCodec{},
		&wireCodec{crc: true},
		&protoCodec{},
		&vtprotoCodec{},
		&gogoCodec{},
		&msgpCodec{},
		&msgpackCodec{},
		&jsonCodec{},
		&jsonGzipCodec{},
	}
}

// mapSlice returns f of each element of s: the conversions between
// Record and the codecs' own record types.
func mapSlice[S, D any](s []S, f func(S) D) []D {
	d := make([]D, len(s))
	for i, v := range s {
		d[i] = f(v)
	}
	return d
}

// writeVia is EncodeTo for libraries without a streaming encoder: c
// encodes into *buf, reused from call to call, and the result is written
// to w in one call.
func writeVia(w io.Writer, buf *[]byte, c Codec) error {
	var err error
	if *buf, err = c.AppendEncode(*buf); err != nil {
		return err
	}
	_, err = w.Write(*buf)
	return err
}
