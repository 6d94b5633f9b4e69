// Package kafkarec is pcapsync's side of Apache Kafka that produces:
// the record format (a batch or statistics frame with its agent's
// hello), the record key's MAC, and the producer that ingest
// collectors and agents writing straight to Kafka send through. It
// knows nothing of the store or the collector; the consumer that
// writes records into a store is internal/kafkaio.
package kafkarec

import (
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// The record format (docs/wire-format.md, "Kafka records"):
//
//   - key: the agent name, so that one agent's records stay in one
//     partition, in order;
//   - value: one frame exactly as the agent sent it (its 8-byte header
//     and payload): a Batch (compressed or not) or a Stats frame;
//   - header HelloHeader: the Hello frame of the agent's session, listing
//     every interface it declared so far, so that each record can be
//     written on its own (a writer that starts from a committed offset
//     never sees the start of the session).
const HelloHeader = "pcapsync-hello"

// InfoHeader, optional, holds the Info frame of the agent's session
// (wire.AppendInfo: its version): an agent writing straight to Kafka
// adds its own, an ingest collector the one its agent sent. A writer
// before it ignores the header; a writer reads it only to show the
// agent's version, so a header it cannot read (malformed, over
// maxInfoHeader, given twice) leaves the version unknown and the record
// is written all the same (Record.InfoErr says why).
const InfoHeader = "pcapsync-info"

// maxInfoHeader bounds the InfoHeader a writer reads: a whole Info frame
// with every field at its longest is larger, but what AppendInfo writes
// is at most infoReserve bytes.
const maxInfoHeader = 1 << 10

// infoReserve is the most bytes the Info frame that a producer of ours
// adds takes: the frame's header, the field count, one version field.
const infoReserve = wire.HeaderSize + 1 + 2 + wire.MaxVersionLen

// recordOverhead bounds what a record adds around its value and hello
// in a Kafka record batch (v2: the batch header of 61 bytes, the
// record's varints and the header key), for a batch of one record, and
// the MAC header a RecordKey adds, and room for an InfoHeader.
const recordOverhead = 61 + 64 + len(HelloHeader) + macOverhead + 16 + len(InfoHeader) + infoReserve

// NewRecord returns the record of one frame of agent's session, without
// a MAC (RecordKey.Sign adds it): with an InfoHeader when info (an Info
// frame, wire.AppendInfo) is not nil. It keeps the slices it is given.
func NewRecord(topic, agent string, hello, info, frame []byte) *kgo.Record {
	r := &kgo.Record{
		Topic:   topic,
		Key:     []byte(agent),
		Value:   frame,
		Headers: []kgo.RecordHeader{{Key: HelloHeader, Value: hello}},
	}
	if info != nil {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: InfoHeader, Value: info})
	}
	return r
}

// MaxFrame returns the largest frame (header included) that fits a
// record of at most maxRecord bytes with this agent name and hello; 0
// if none does.
func MaxFrame(maxRecord int, agent string, hello []byte) uint32 {
	n := maxRecord - recordOverhead - len(agent) - len(hello)
	if n <= wire.HeaderSize {
		return 0
	}
	return uint32(n)
}

// Record is a decoded record.
type Record struct {
	Agent    string
	Hello    wire.Hello
	HelloRaw []byte // the Hello frame as the header holds it
	Type     wire.Type
	Flags    uint8
	Payload  []byte // the frame's payload, in the record's value
	// Info is the record's InfoHeader, zero without one; InfoErr says
	// why an InfoHeader was not read (Info is zero then).
	Info    wire.Info
	InfoErr error
}

// ParseRecord decodes and checks a record: a valid agent name as key
// that its hello names too, exactly one hello, and a value that is one
// whole Batch or Stats frame within lim. The batch's own contents are
// checked where it is written. Errors wrap ErrRecord and
// wire.ErrMalformed (or wire.ErrTooLarge, or wire.ErrBadName for the
// key) and say what is wrong.
func ParseRecord(r *kgo.Record, lim wire.Limits) (Record, error) {
	rec, err := parseRecord(r, lim)
	if err != nil {
		return rec, fmt.Errorf("%w of %q: %w", ErrRecord, r.Key, err)
	}
	return rec, nil
}

func parseRecord(r *kgo.Record, lim wire.Limits) (Record, error) {
	var rec Record
	rec.Agent = string(r.Key)
	if err := wire.ValidateName(rec.Agent); err != nil {
		return rec, fmt.Errorf("key: %w", err)
	}
	for _, h := range r.Headers {
		if h.Key != HelloHeader {
			continue
		}
		if rec.HelloRaw != nil {
			return rec, fmt.Errorf("two %s headers: %w", HelloHeader, wire.ErrMalformed)
		}
		rec.HelloRaw = h.Value
	}
	if rec.HelloRaw == nil {
		return rec, fmt.Errorf("no %s header: %w", HelloHeader, wire.ErrMalformed)
	}
	t, p, err := parseFrame(rec.HelloRaw, wire.Limits{})
	if err == nil && t.Type != wire.TypeHello {
		err = fmt.Errorf("a %s frame: %w", t.Type, wire.ErrMalformed)
	}
	if err == nil {
		rec.Hello, err = wire.ParseHello(p)
	}
	if err != nil {
		return rec, fmt.Errorf("%s header: %w", HelloHeader, err)
	}
	if rec.Hello.Name != rec.Agent {
		return rec, fmt.Errorf("its hello names agent %q: %w", rec.Hello.Name, wire.ErrMalformed)
	}
	h, p, err := parseFrame(r.Value, lim)
	if err != nil {
		return rec, fmt.Errorf("value: %w", err)
	}
	if h.Type != wire.TypeBatch && h.Type != wire.TypeStats {
		return rec, fmt.Errorf("value is a %s frame, want batch or stats: %w", h.Type, wire.ErrMalformed)
	}
	rec.Type, rec.Flags, rec.Payload = h.Type, h.Flags, p
	rec.Info, rec.InfoErr = parseInfoHeader(r.Headers)
	return rec, nil
}

// parseInfoHeader reads the InfoHeader among hs, if any.
func parseInfoHeader(hs []kgo.RecordHeader) (wire.Info, error) {
	var raw []byte
	n := 0
	for _, h := range hs {
		if h.Key == InfoHeader {
			raw = h.Value
			n++
		}
	}
	switch {
	case n == 0:
		return wire.Info{}, nil
	case n > 1:
		return wire.Info{}, fmt.Errorf("%d %s headers: %w", n, InfoHeader, wire.ErrMalformed)
	case len(raw) > maxInfoHeader:
		return wire.Info{}, fmt.Errorf("%s header of %d bytes over limit %d: %w", InfoHeader, len(raw), maxInfoHeader, wire.ErrTooLarge)
	}
	h, p, err := parseFrame(raw, wire.Limits{})
	if err == nil && h.Type != wire.TypeInfo {
		err = fmt.Errorf("a %s frame: %w", h.Type, wire.ErrMalformed)
	}
	var in wire.Info
	if err == nil {
		in, err = wire.ParseInfo(p)
	}
	if err != nil {
		return wire.Info{}, fmt.Errorf("%s header: %w", InfoHeader, err)
	}
	return in, nil
}

// parseFrame splits b into one frame's header and payload; b must hold
// exactly that frame.
func parseFrame(b []byte, lim wire.Limits) (wire.Header, []byte, error) {
	if len(b) < wire.HeaderSize {
		return wire.Header{}, nil, fmt.Errorf("%d bytes, shorter than a frame header: %w", len(b), wire.ErrMalformed)
	}
	h, err := wire.ParseHeader((*[wire.HeaderSize]byte)(b[:wire.HeaderSize]), lim)
	if err != nil {
		return h, nil, err
	}
	if int(h.Length) != len(b)-wire.HeaderSize {
		return h, nil, fmt.Errorf("frame header says %d bytes of payload, %d follow: %w", h.Length, len(b)-wire.HeaderSize, wire.ErrMalformed)
	}
	return h, b[wire.HeaderSize:], nil
}
