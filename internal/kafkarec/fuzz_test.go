package kafkarec

import (
	"bytes"
	"errors"
	"testing"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// FuzzRecord decodes records as a writer does (ParseRecord, then the
// batch's checksum) and checks, besides never panicking:
//   - an accepted record names a valid agent, which its hello names too;
//     its type is batch or stats; its payload is the value past the
//     frame header, within the frame limit;
//   - a record signed with a key verifies; one byte of its value or key
//     changed, or another key, and it does not; unsigned, it does not;
//   - an accepted batch with a checksum no longer passes once any one
//     bit of its payload is flipped.
func FuzzRecord(f *testing.F) {
	hello := wire.AppendHello(nil, &wire.Hello{Name: "web1", Host: "h", Interfaces: []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 65535}}})
	a := testAgent{name: "web1", hello: hello}
	batch := a.batch("t", 7, 3).Value
	f.Add("web1", hello, batch, uint16(20))
	f.Add("web1", hello, wire.AppendStats(nil, &wire.Stats{AgentDrops: 1}), uint16(0))
	f.Add("web1", hello, batch[:len(batch)-1], uint16(3))
	f.Add("web1", hello, append(append([]byte{}, batch...), 0), uint16(9))
	f.Add("web1", []byte{}, []byte{}, uint16(0))
	f.Add("", hello, batch, uint16(1))
	f.Add("web1", hello[:9], batch, uint16(2))
	key, err := NewRecordKey([]byte("0123456789abcdef"))
	if err != nil {
		f.Fatal(err)
	}
	other, _ := NewRecordKey([]byte("0123456789abcdeF"))
	const maxFrame = 1 << 16
	f.Fuzz(func(t *testing.T, agent string, hello, value []byte, at uint16) {
		r := NewRecord("t", agent, hello, nil, value)
		rec, err := ParseRecord(r, wire.Limits{MaxFrame: maxFrame})
		if err == nil {
			switch {
			case rec.Agent != agent || rec.Hello.Name != agent || wire.ValidateName(agent) != nil:
				t.Fatalf("accepted agent %q, hello names %q, key %q", rec.Agent, rec.Hello.Name, agent)
			case rec.Type != wire.TypeBatch && rec.Type != wire.TypeStats:
				t.Fatalf("accepted a %s frame", rec.Type)
			case len(value) < wire.HeaderSize || !bytes.Equal(rec.Payload, value[wire.HeaderSize:]) || len(rec.Payload) > maxFrame:
				t.Fatalf("payload of %d bytes from a value of %d", len(rec.Payload), len(value))
			case !bytes.Equal(rec.HelloRaw, hello):
				t.Fatalf("hello not the header's")
			}
		} else if !errors.Is(err, ErrRecord) {
			t.Fatalf("error %v does not wrap ErrRecord", err)
		}

		if key.Verify(r) == nil {
			t.Fatalf("an unsigned record verified")
		}
		key.Sign(r)
		if err := key.Verify(r); err != nil {
			t.Fatalf("a signed record does not verify: %v", err)
		}
		if other.Verify(r) == nil {
			t.Fatalf("verified under another key")
		}
		if len(value) > 0 {
			i := int(at) % len(value)
			value[i] ^= 0x80
			if !errors.Is(key.Verify(r), ErrUnauthenticated) {
				t.Fatalf("verified with byte %d of the value changed", i)
			}
			value[i] ^= 0x80
		}
		r.Key = append(r.Key, 'x')
		if key.Verify(r) == nil {
			t.Fatalf("verified with the key changed")
		}

		if err != nil || rec.Type != wire.TypeBatch {
			return
		}
		b, err := wire.ParseBatch(rec.Flags, rec.Payload, wire.BatchLimits{Unchecked: true})
		if err != nil || b.Unchecked {
			return
		}
		bit := int(at) % (8 * len(rec.Payload))
		rec.Payload[bit/8] ^= 1 << (bit % 8)
		if _, err := wire.ParseBatch(rec.Flags, rec.Payload, wire.BatchLimits{Unchecked: true}); err == nil {
			t.Fatalf("a batch passed its checksum with bit %d flipped", bit)
		}
	})
}
