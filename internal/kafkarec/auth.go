package kafkarec

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// MACHeader is the record header that holds the record's
// authentication code when producers and writers share a record key
// (RecordKey; docs/kafka.md, "Record key"): HMAC-SHA256 over the
// record's key, every other header and its value.
const MACHeader = "pcapsync-mac"

// macOverhead bounds what the MAC header adds to a record: the header's
// key, its 32-byte value and their varint lengths.
const macOverhead = len(MACHeader) + sha256.Size + 8

// MinRecordKey is the shortest record key NewRecordKey takes, in bytes.
const MinRecordKey = 16

// macDomain starts every authenticated message, so that a MAC made for
// another purpose under the same key is never a record's.
var macDomain = []byte("pcapsync kafka record v1\x00")

// RecordKey authenticates records: Sign adds a MAC header, Verify
// checks it. Every producer (ingest collectors, agents writing straight
// to Kafka) and every writer of a topic shares one key; a writer with a
// key refuses records without a valid MAC, so that a producer without
// the key cannot write into an agent's files. A nil *RecordKey signs
// nothing and verifies nothing. Safe for concurrent use.
//
// The MAC is HMAC-SHA256(key, m) with m the concatenation of macDomain,
// the record key, each header but MACHeader in order (its key, then its
// value) and the value, each preceded by its length as a 32-bit
// big-endian integer (the header count too), so that no two records
// share an m. The topic, partition, offset and timestamp are not
// covered: a record copied from the topic into it again (or into
// another topic of the same key) passes, and is dropped by the marks
// as the duplicate it is.
type RecordKey struct {
	pool sync.Pool // *macState
}

// macState is one HMAC-SHA256 under a RecordKey's key, with scratch.
type macState struct {
	h hash.Hash
	n [4]byte
	s []byte // header keys, copied
}

// NewRecordKey returns the RecordKey of secret, which must hold at
// least MinRecordKey bytes; the RecordKey keeps no reference to it.
func NewRecordKey(secret []byte) (*RecordKey, error) {
	if len(secret) < MinRecordKey {
		return nil, fmt.Errorf("record key of %d bytes: %w (at least %d)", len(secret), ErrShortKey, MinRecordKey)
	}
	k := append([]byte(nil), secret...)
	rk := &RecordKey{}
	rk.pool.New = func() any { return &macState{h: hmac.New(sha256.New, k)} }
	return rk, nil
}

// Sign adds r's MAC header, computed over r as it is: r must not change
// afterwards. A record signed twice carries two MAC headers, which
// Verify refuses.
func (k *RecordKey) Sign(r *kgo.Record) {
	if k == nil {
		return
	}
	var sum [sha256.Size]byte
	k.sum(sum[:0], r)
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: MACHeader, Value: sum[:]})
}

// Verify checks r's MAC: exactly one MACHeader, whose value is the MAC
// of the rest of r under k. Errors wrap ErrUnauthenticated.
func (k *RecordKey) Verify(r *kgo.Record) error {
	if k == nil {
		return nil
	}
	var got []byte
	n := 0
	for _, h := range r.Headers {
		if h.Key == MACHeader {
			got = h.Value
			n++
		}
	}
	switch {
	case n == 0:
		return fmt.Errorf("no %s header: %w", MACHeader, ErrUnauthenticated)
	case n > 1:
		return fmt.Errorf("%d %s headers: %w", n, MACHeader, ErrUnauthenticated)
	}
	var want [sha256.Size]byte
	if !hmac.Equal(got, k.sum(want[:0], r)) {
		return fmt.Errorf("%s does not match the record: %w", MACHeader, ErrUnauthenticated)
	}
	return nil
}

// sum appends the MAC of r (its MACHeader headers left out) to dst.
func (k *RecordKey) sum(dst []byte, r *kgo.Record) []byte {
	st := k.pool.Get().(*macState)
	defer k.pool.Put(st)
	st.h.Reset()
	st.h.Write(macDomain)
	st.field(r.Key)
	count := 0
	for _, hd := range r.Headers {
		if hd.Key != MACHeader {
			count++
		}
	}
	st.length(count)
	for _, hd := range r.Headers {
		if hd.Key != MACHeader {
			st.s = append(st.s[:0], hd.Key...)
			st.field(st.s)
			st.field(hd.Value)
		}
	}
	st.field(r.Value)
	return st.h.Sum(dst)
}

// length writes n as 4 bytes, big-endian.
func (st *macState) length(n int) {
	binary.BigEndian.PutUint32(st.n[:], uint32(n))
	st.h.Write(st.n[:])
}

// field writes b after its length.
func (st *macState) field(b []byte) {
	st.length(len(b))
	st.h.Write(b)
}
