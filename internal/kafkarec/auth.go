package kafkarec

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// AgentMACHeader is the record header that holds the record's
// authentication code under its agent's key (RecordKey; docs/kafka.md,
// "Record key"): HMAC-SHA256 over the record's key, every other header
// and its value, under a key derived from the topic's key and the agent
// name the record's key holds. Producers of this release add it.
const AgentMACHeader = "pcapsync-agent-mac"

// MACHeader is the header of producers before per-agent keys: the same
// MAC under the topic's key itself. Writers with the topic's key still
// take it; nothing of this release writes it.
const MACHeader = "pcapsync-mac"

// macOverhead bounds what the MAC header adds to a record: the header's
// key, its 32-byte value and their varint lengths.
const macOverhead = len(AgentMACHeader) + sha256.Size + 8

// MinRecordKey is the shortest topic key a RecordKey takes, in bytes.
const MinRecordKey = 16

// The domains that start every message a key authenticates, so that a
// MAC made for one purpose is never taken for another's: a record under
// the topic's key (MACHeader), a record under an agent's key
// (AgentMACHeader), an agent's key derived from the topic's.
var (
	macDomain      = []byte("pcapsync kafka record v1\x00")
	agentMACDomain = []byte("pcapsync kafka record v2\x00")
	agentKeyDomain = []byte("pcapsync kafka agent key v1\x00")
)

// agentKeyPrefix starts the one line of an agent's key file: the
// prefix, the agent's name, a space and the key in hex (AgentKeyFile).
const agentKeyPrefix = "pcapsync-agent-key "

// RecordKey authenticates records: Sign adds a MAC header, Verify
// checks it. It is either the topic's key, which ingest collectors and
// writers hold, or one agent's key, derived from the topic's key and
// the agent's name (AgentKeyFile), which an agent writing straight to
// Kafka holds. Every record is signed under its agent's key, so a
// writer with the topic's key refuses a record without a valid MAC,
// and an agent with its own key cannot write into another agent's
// files. A nil *RecordKey signs nothing and verifies nothing. Safe for
// concurrent use.
//
// An agent's key is HMAC-SHA256(topic key, agentKeyDomain || name). A
// MAC is HMAC-SHA256(key, m) with m the concatenation of a domain, the
// record key, each header but the MAC headers in order (its key, then
// its value) and the value, each preceded by its length as a 32-bit
// big-endian integer (the header count too), so that no two records
// share an m. The topic, partition, offset and timestamp are not
// covered: a record copied from the topic into it again (or into
// another topic of the same key) passes, and is dropped by the marks
// as the duplicate it is.
type RecordKey struct {
	topic []byte     // the topic's key in HMAC's form (at most a block); nil for an agent's key
	agent string     // an agent's key: the agent whose records it signs
	own   []byte     // an agent's key: the key
	prev  *RecordKey // the topic's key before this one: Verify takes its records too
	pool  sync.Pool  // *macState
}

// macState computes one HMAC-SHA256 at a time under any key, with
// scratch, allocating nothing once made.
type macState struct {
	in, out hash.Hash
	pad     [sha256.BlockSize]byte // the outer pad of the key in use
	sum     [sha256.Size]byte
	key     [sha256.Size]byte // an agent's key, derived
	n       [4]byte
	s       []byte // header keys and names, copied
}

// NewRecordKey returns the topic's RecordKey of secret, which must hold
// at least MinRecordKey bytes; the RecordKey keeps no reference to it.
func NewRecordKey(secret []byte) (*RecordKey, error) {
	if len(secret) < MinRecordKey {
		return nil, fmt.Errorf("record key of %d bytes: %w (at least %d)", len(secret), ErrShortKey, MinRecordKey)
	}
	k := newKey()
	if len(secret) > sha256.BlockSize { // HMAC's rule for a long key
		sum := sha256.Sum256(secret)
		k.topic = sum[:]
	} else {
		k.topic = bytes.Clone(secret)
	}
	return k, nil
}

func newKey() *RecordKey {
	k := &RecordKey{}
	k.pool.New = func() any { return &macState{in: sha256.New(), out: sha256.New()} }
	return k
}

// ParseRecordKey returns the RecordKey of a key file's contents, without
// surrounding white space: an agent's key (AgentKeyFile's line) or else
// the topic's key (NewRecordKey). It keeps no reference to b.
func ParseRecordKey(b []byte) (*RecordKey, error) {
	b = bytes.TrimSpace(b)
	if !bytes.HasPrefix(b, []byte(agentKeyPrefix)) {
		return NewRecordKey(b)
	}
	f := strings.Fields(string(b[len(agentKeyPrefix):]))
	if len(f) != 2 {
		return nil, fmt.Errorf("an agent's record key: want %q, the agent's name and 64 hex digits: %w", agentKeyPrefix, ErrBadKeyFile)
	}
	if err := wire.ValidateName(f[0]); err != nil {
		return nil, fmt.Errorf("an agent's record key: %w: %w", ErrBadKeyFile, err)
	}
	own, err := hex.DecodeString(f[1])
	if err != nil || len(own) != sha256.Size {
		return nil, fmt.Errorf("an agent's record key for %q: want 64 hex digits: %w", f[0], ErrBadKeyFile)
	}
	k := newKey()
	k.agent, k.own = f[0], own
	return k, nil
}

// Agent is the agent whose records an agent's key signs; "" for the
// topic's key (and a nil key).
func (k *RecordKey) Agent() string {
	if k == nil {
		return ""
	}
	return k.agent
}

// AgentKeyFile returns the key file of agent's key, derived from the
// topic's key k: one line of agentKeyPrefix, the name and the key in
// hex. An agent's key derives none.
func (k *RecordKey) AgentKeyFile(agent string) ([]byte, error) {
	if k == nil || k.topic == nil {
		return nil, fmt.Errorf("an agent's key is derived from the topic's record key: %w", ErrBadKeyFile)
	}
	if err := wire.ValidateName(agent); err != nil {
		return nil, err
	}
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	key := k.derive(st, []byte(agent))
	return fmt.Appendf(nil, "%s%s %x\n", agentKeyPrefix, agent, key), nil
}

// WithPrevious returns the topic's key k that also verifies what prev,
// the topic's key before it, signed (or its agents' keys), while the
// producers move from prev to k: Verify takes a record that either
// key's MAC authenticates. k signs as before. Both must be the topic's
// keys.
func (k *RecordKey) WithPrevious(prev *RecordKey) (*RecordKey, error) {
	if k == nil || prev == nil || k.topic == nil || prev.topic == nil || prev.prev != nil {
		return nil, fmt.Errorf("a previous record key: both keys must be the topic's: %w", ErrBadKeyFile)
	}
	nk := newKey()
	nk.topic, nk.prev = k.topic, prev
	return nk, nil
}

// derive returns the key of the agent named name, in st.key.
func (k *RecordKey) derive(st *macState, name []byte) []byte {
	if k.topic == nil {
		return k.own
	}
	st.start(k.topic)
	st.in.Write(agentKeyDomain)
	st.in.Write(name)
	return st.finish(st.key[:0])
}

// Sign adds r's AgentMACHeader, computed over r as it is under the key
// of the agent r's key names: r must not change afterwards. An agent's
// key signs a record of another agent all the same, which writers then
// refuse. A record signed twice carries two MAC headers, which Verify
// refuses.
func (k *RecordKey) Sign(r *kgo.Record) {
	if k == nil {
		return
	}
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	var sum [sha256.Size]byte
	st.message(k.derive(st, r.Key), agentMACDomain, r)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: AgentMACHeader, Value: st.finish(sum[:0])})
}

// Verify checks r's MAC: exactly one MAC header, whose value is the MAC
// of the rest of r: an AgentMACHeader under the key of the agent r's
// key names, or a MACHeader (producers before per-agent keys) under
// the topic's key; with a previous key (WithPrevious), under either
// topic key. An agent's key verifies only its own agent's records, and
// no MACHeader. Errors wrap ErrUnauthenticated.
func (k *RecordKey) Verify(r *kgo.Record) error {
	_, err := k.Authenticate(r)
	return err
}

// Authenticate is Verify, and reports whether the previous key (not
// k's own) authenticated r: a producer still on the old key.
func (k *RecordKey) Authenticate(r *kgo.Record) (previous bool, err error) {
	if k == nil {
		return false, nil
	}
	err = k.verify(r)
	if err != nil && k.prev != nil && k.prev.verify(r) == nil {
		return true, nil
	}
	return false, err
}

// verify is Verify under k alone.
func (k *RecordKey) verify(r *kgo.Record) error {
	var got []byte
	n, agentMAC := 0, false
	for _, h := range r.Headers {
		if h.Key == AgentMACHeader || h.Key == MACHeader {
			got, agentMAC = h.Value, h.Key == AgentMACHeader
			n++
		}
	}
	switch {
	case n == 0:
		return fmt.Errorf("no %s header: %w", AgentMACHeader, ErrUnauthenticated)
	case n > 1:
		return fmt.Errorf("%d MAC headers: %w", n, ErrUnauthenticated)
	case k.topic == nil && !agentMAC:
		return fmt.Errorf("a %s header, and an agent's key: %w", MACHeader, ErrUnauthenticated)
	case k.topic == nil && string(r.Key) != k.agent:
		return fmt.Errorf("a record of agent %q, and agent %q's key: %w", r.Key, k.agent, ErrUnauthenticated)
	}
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	if agentMAC {
		st.message(k.derive(st, r.Key), agentMACDomain, r)
	} else {
		st.message(k.topic, macDomain, r)
	}
	var want [sha256.Size]byte
	if !hmac.Equal(got, st.finish(want[:0])) {
		return fmt.Errorf("the MAC does not match the record: %w", ErrUnauthenticated)
	}
	return nil
}

// message starts the MAC of r (its MAC headers left out) under key,
// after domain; finish ends it.
func (st *macState) message(key, domain []byte, r *kgo.Record) {
	st.start(key)
	st.in.Write(domain)
	st.field(r.Key)
	count := 0
	for _, hd := range r.Headers {
		if hd.Key != AgentMACHeader && hd.Key != MACHeader {
			count++
		}
	}
	st.length(count)
	for _, hd := range r.Headers {
		if hd.Key != AgentMACHeader && hd.Key != MACHeader {
			st.s = append(st.s[:0], hd.Key...)
			st.field(st.s)
			st.field(hd.Value)
		}
	}
	st.field(r.Value)
}

// start begins HMAC-SHA256 under key (at most a block: the topic's key
// as NewRecordKey keeps it, or an agent's).
func (st *macState) start(key []byte) {
	st.pad = [sha256.BlockSize]byte{}
	copy(st.pad[:], key)
	for i := range st.pad {
		st.pad[i] ^= 0x36
	}
	st.in.Reset()
	st.in.Write(st.pad[:])
	for i := range st.pad {
		st.pad[i] ^= 0x36 ^ 0x5c
	}
}

// finish appends the MAC begun by start to dst.
func (st *macState) finish(dst []byte) []byte {
	inner := st.in.Sum(st.sum[:0])
	st.out.Reset()
	st.out.Write(st.pad[:])
	st.out.Write(inner)
	return st.out.Sum(dst)
}

// length writes n as 4 bytes, big-endian.
func (st *macState) length(n int) {
	binary.BigEndian.PutUint32(st.n[:], uint32(n))
	st.in.Write(st.n[:])
}

// field writes b after its length.
func (st *macState) field(b []byte) {
	st.length(len(b))
	st.in.Write(b)
}
