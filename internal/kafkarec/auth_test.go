package kafkarec

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
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

// refMAC is a record's MAC as docs/kafka.md defines it, computed with
// crypto/hmac: the oracle of the package's own HMAC.
func refMAC(key, domain []byte, r *kgo.Record) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(domain)
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		h.Write(b)
	}
	field(r.Key)
	var hs []kgo.RecordHeader
	for _, hd := range r.Headers {
		if hd.Key != AgentMACHeader && hd.Key != MACHeader {
			hs = append(hs, hd)
		}
	}
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(hs))))
	for _, hd := range hs {
		field([]byte(hd.Key))
		field(hd.Value)
	}
	field(r.Value)
	return h.Sum(nil)
}

// refAgentKey is agent's key under topic, computed with crypto/hmac.
func refAgentKey(topic []byte, agent string) []byte {
	h := hmac.New(sha256.New, topic)
	h.Write(agentKeyDomain)
	h.Write([]byte(agent))
	return h.Sum(nil)
}

// TestAgentKeys: an agent's key (derived from the topic's, through its
// key file) signs its agent's records, which a writer with the topic's
// key takes, as it takes records a topic key signed and those of
// producers before per-agent keys (MACHeader under the topic's key); a
// record of another agent signed with it is refused, so one agent's key
// cannot write into another's files. Every MAC is the one crypto/hmac
// computes (topic keys of 16 to 100 bytes: HMAC hashes those over a
// block).
func TestAgentKeys(t *testing.T) {
	for _, size := range []int{16, 32, 64, 65, 100} {
		secret := bytes.Repeat([]byte{byte(size)}, size)
		secret[0] = 'k'
		topic, err := NewRecordKey(secret)
		if err != nil {
			t.Fatal(err)
		}
		file, err := topic.AgentKeyFile("web1")
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("pcapsync-agent-key web1 %x\n", refAgentKey(secret, "web1")); string(file) != want {
			t.Fatalf("%d-byte topic key: agent key file %q, want %q", size, file, want)
		}
		own, err := ParseRecordKey(append([]byte("\n "), file...))
		if err != nil || own.Agent() != "web1" {
			t.Fatalf("the agent key file: %v, agent %q", err, own.Agent())
		}
		web1, web2 := newTestAgent("web1", 1), newTestAgent("web2", 1)
		for _, tt := range []struct {
			name       string
			rec        func() *kgo.Record
			topicOK    bool // a writer with the topic's key takes it
			ownOK      bool // web1's key verifies it
			wantHeader string
			wantMAC    []byte
		}{
			{"web1's record, web1's key", func() *kgo.Record { r := web1.batch("t", 1, 2); own.Sign(r); return r }, true, true,
				AgentMACHeader, nil},
			{"web1's record, the topic's key", func() *kgo.Record { r := web1.batch("t", 1, 2); topic.Sign(r); return r }, true, true,
				AgentMACHeader, nil},
			{"web2's record, web1's key", func() *kgo.Record { r := web2.batch("t", 1, 2); own.Sign(r); return r }, false, false,
				AgentMACHeader, nil},
			{"web2's record, the topic's key", func() *kgo.Record { r := web2.batch("t", 1, 2); topic.Sign(r); return r }, true, false,
				AgentMACHeader, nil},
			{"a producer before agent keys", func() *kgo.Record {
				r := web1.batch("t", 1, 2)
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: MACHeader, Value: refMAC(secret, macDomain, r)})
				return r
			}, true, false, MACHeader, nil},
			{"both headers", func() *kgo.Record {
				r := web1.batch("t", 1, 2)
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: MACHeader, Value: refMAC(secret, macDomain, r)})
				own.Sign(r)
				return r
			}, false, false, AgentMACHeader, nil},
			{"the topic key's MAC in the agent header", func() *kgo.Record {
				r := web1.batch("t", 1, 2)
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: AgentMACHeader, Value: refMAC(secret, agentMACDomain, r)})
				return r
			}, false, false, AgentMACHeader, nil},
		} {
			r := tt.rec()
			if err := topic.Verify(r); tt.topicOK != (err == nil) || err != nil && !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%d-byte topic key, %s: the topic's key verifies: %v, want ok %v", size, tt.name, err, tt.topicOK)
			}
			if err := own.Verify(r); tt.ownOK != (err == nil) || err != nil && !errors.Is(err, ErrUnauthenticated) {
				t.Errorf("%d-byte topic key, %s: web1's key verifies: %v, want ok %v", size, tt.name, err, tt.ownOK)
			}
			last := r.Headers[len(r.Headers)-1]
			if last.Key != tt.wantHeader {
				t.Errorf("%s: last header %q, want %q", tt.name, last.Key, tt.wantHeader)
			}
			if last.Key == AgentMACHeader && tt.topicOK {
				if want := refMAC(refAgentKey(secret, string(r.Key)), agentMACDomain, r); !bytes.Equal(last.Value, want) {
					t.Errorf("%d-byte topic key, %s: MAC %x, crypto/hmac's %x", size, tt.name, last.Value, want)
				}
			}
		}
	}
}

// TestParseRecordKey: a key file is an agent's key only when it starts
// as one, and then must be one whole (a valid name, 32 bytes in hex);
// an agent's key derives no other.
func TestParseRecordKey(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for _, tt := range []struct {
		in    string
		agent string
		err   error
	}{
		{"a-topic-key-of-16+", "", nil},
		{"short", "", ErrShortKey},
		{"pcapsync-agent-key web1 " + hex64, "web1", nil},
		{"  pcapsync-agent-key web1 " + hex64 + "\n", "web1", nil},
		{"pcapsync-agent-key web1", "", ErrBadKeyFile},
		{"pcapsync-agent-key web1 " + hex64[2:], "", ErrBadKeyFile},
		{"pcapsync-agent-key web1 " + hex64 + "00", "", ErrBadKeyFile},
		{"pcapsync-agent-key web1 " + strings.Repeat("zz", 32), "", ErrBadKeyFile},
		{"pcapsync-agent-key ../x " + hex64, "", ErrBadKeyFile},
		{"pcapsync-agent-key web1 " + hex64 + " more", "", ErrBadKeyFile},
	} {
		k, err := ParseRecordKey([]byte(tt.in))
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("%q: %v, want %v", tt.in, err, tt.err)
			}
			continue
		}
		if err != nil || k.Agent() != tt.agent {
			t.Errorf("%q: %v, agent %q; want agent %q", tt.in, err, k.Agent(), tt.agent)
		}
	}
	own, _ := ParseRecordKey([]byte("pcapsync-agent-key web1 " + hex64))
	if _, err := own.AgentKeyFile("web2"); !errors.Is(err, ErrBadKeyFile) {
		t.Errorf("an agent's key derived another's: %v", err)
	}
	topic, _ := NewRecordKey([]byte("a-topic-key-of-16+"))
	if _, err := topic.AgentKeyFile("../x"); err == nil {
		t.Errorf("a key derived for a name that is no agent's")
	}
}

// TestPreviousKey: while the topic's key changes, the new key with the
// previous one (WithPrevious) verifies what either signed, under the
// topic's key, an agent's key derived from either, or the MAC of
// producers before agent keys, and says which (Authenticate); it signs
// under the new key alone; it still refuses a third key's records and
// another agent's records signed with an agent's key. Only the topic's
// keys combine.
func TestPreviousKey(t *testing.T) {
	oldSecret := []byte("the-old-key-of-the-topic")
	old, _ := NewRecordKey(oldSecret)
	cur, _ := NewRecordKey([]byte("the-new-key-of-the-topic"))
	third, _ := NewRecordKey([]byte("a-third-key-nobody-holds"))
	both, err := cur.WithPrevious(old)
	if err != nil {
		t.Fatal(err)
	}
	agentKey := func(k *RecordKey, name string) *RecordKey {
		f, err := k.AgentKeyFile(name)
		if err != nil {
			t.Fatal(err)
		}
		a, err := ParseRecordKey(f)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	web1, web2 := newTestAgent("web1", 1), newTestAgent("web2", 1)
	signedBy := func(k *RecordKey, a testAgent) *kgo.Record { r := a.batch("t", 1, 2); k.Sign(r); return r }
	legacy := web1.batch("t", 1, 2)
	legacy.Headers = append(legacy.Headers, kgo.RecordHeader{Key: MACHeader, Value: refMAC(oldSecret, macDomain, legacy)})
	for _, tt := range []struct {
		name     string
		r        *kgo.Record
		ok, prev bool
	}{
		{"the new key", signedBy(cur, web1), true, false},
		{"the old key", signedBy(old, web1), true, true},
		{"web1's key from the new", signedBy(agentKey(cur, "web1"), web1), true, false},
		{"web1's key from the old", signedBy(agentKey(old, "web1"), web1), true, true},
		{"the old key, before agent keys", legacy, true, true},
		{"a third key", signedBy(third, web1), false, false},
		{"web2's record, web1's key from the old", signedBy(agentKey(old, "web1"), web2), false, false},
		{"no MAC", web1.batch("t", 1, 2), false, false},
	} {
		if err := both.Verify(tt.r); tt.ok != (err == nil) || err != nil && !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: %v, want ok %v", tt.name, err, tt.ok)
		}
		if prev, _ := both.Authenticate(tt.r); prev != tt.prev {
			t.Errorf("%s: authenticated by the previous key %v, want %v", tt.name, prev, tt.prev)
		}
	}
	r := signedBy(both, web1)
	if cur.Verify(r) != nil || old.Verify(r) == nil {
		t.Errorf("the new key with the previous signed under the old one")
	}
	own := agentKey(old, "web1")
	for name, pair := range map[string][2]*RecordKey{"an agent's key as the previous": {cur, own}, "an agent's key as the new": {own, old},
		"a previous key with its own previous": {cur, both}, "none": {cur, nil}} {
		if _, err := pair[0].WithPrevious(pair[1]); !errors.Is(err, ErrBadKeyFile) {
			t.Errorf("%s: %v, want ErrBadKeyFile", name, err)
		}
	}
}
