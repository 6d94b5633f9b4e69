package kafkarec

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestRecordKey: a signed record verifies; every way of changing it, or
// its MAC header, does not; a nil key signs and checks nothing.
func TestRecordKey(t *testing.T) {
	if _, err := NewRecordKey(make([]byte, MinRecordKey-1)); !errors.Is(err, ErrShortKey) {
		t.Fatalf("a %d-byte key: %v, want ErrShortKey", MinRecordKey-1, err)
	}
	key, err := NewRecordKey([]byte("0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAgent("web1", 1)
	signed := func() *kgo.Record {
		r := a.batch("t", 1, 2)
		key.Sign(r)
		return r
	}
	for _, tt := range []struct {
		name string
		edit func(r *kgo.Record)
		ok   bool
	}{
		{"as signed", func(*kgo.Record) {}, true},
		{"topic and offset not covered", func(r *kgo.Record) { r.Topic, r.Offset, r.Partition = "other", 99, 3 }, true},
		{"value changed", func(r *kgo.Record) { r.Value[len(r.Value)-1] ^= 1 }, false},
		{"key changed", func(r *kgo.Record) { r.Key = []byte("web2") }, false},
		{"hello changed", func(r *kgo.Record) { r.Headers[0].Value = wire.AppendHello(nil, &wire.Hello{Name: "web1"}) }, false},
		{"header added", func(r *kgo.Record) { r.Headers = append(r.Headers, kgo.RecordHeader{Key: "x"}) }, false},
		{"headers reordered", func(r *kgo.Record) {
			r.Headers = append([]kgo.RecordHeader{{Key: "x"}}, r.Headers...)
			key.Sign(r)
			r.Headers[0], r.Headers[1] = r.Headers[1], r.Headers[0]
		}, false},
		{"signed twice", func(r *kgo.Record) { key.Sign(r) }, false},
		{"MAC cut", func(r *kgo.Record) { h := &r.Headers[len(r.Headers)-1]; h.Value = h.Value[:16] }, false},
		{"MAC removed", func(r *kgo.Record) { r.Headers = r.Headers[:len(r.Headers)-1] }, false},
		{"key moved into the value", func(r *kgo.Record) { r.Value = append(append([]byte{}, r.Key...), r.Value...); r.Key = nil }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := signed()
			tt.edit(r)
			err := key.Verify(r)
			if tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("Verify = %v, want ok %v (or ErrUnauthenticated)", err, tt.ok)
			}
		})
	}
	var none *RecordKey
	r := a.batch("t", 1, 1)
	none.Sign(r)
	if len(r.Headers) != 1 || none.Verify(r) != nil {
		t.Errorf("a nil key signed or refused a record")
	}
}
