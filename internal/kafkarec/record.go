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

// recordOverhead bounds what a record adds around its value and hello
// in a Kafka record batch (v2: the batch header of 61 bytes, the
// record's varints and the header key), for a batch of one record, and
// the MAC header a RecordKey adds.
const recordOverhead = 61 + 64 + len(HelloHeader) + macOverhead

// NewRecord returns the record of one frame of agent's session, without
// a MAC (RecordKey.Sign adds it). It keeps the slices it is given.
func NewRecord(topic, agent string, hello, frame []byte) *kgo.Record {
	return &kgo.Record{
		Topic:   topic,
		Key:     []byte(agent),
		Value:   frame,
		Headers: []kgo.RecordHeader{{Key: HelloHeader, Value: hello}},
	}
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
	return rec, nil
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
