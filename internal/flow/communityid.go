package flow

import (
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
)

// CommunityIDLen is the length of a Community ID v1 in its base64 form
// ("1:" and 28 characters).
const CommunityIDLen = 2 + 28

// CommunityID returns the Community ID v1 of k with seed (0 is the
// default every tool uses), in its base64 form "1:...", as the
// reference implementation (the communityid package on PyPI) computes
// it for the tuple (k.Proto, addresses, ports), or "" for a key that is
// not IP. The direction of k does not matter. A key without ports (a
// later fragment, a header cut short, a protocol without ports) is
// hashed without them, as the specification hashes protocols without
// ports (the reference refuses such tuples for TCP, UDP, SCTP and
// ICMP).
func (k *Key) CommunityID(seed uint16) string {
	var b [CommunityIDLen]byte
	return string(k.AppendCommunityID(b[:0], seed))
}

// AppendCommunityID appends k's Community ID (see CommunityID) to dst;
// it appends nothing for a key that is not IP. It does not allocate
// when dst has room for CommunityIDLen bytes.
func (k *Key) AppendCommunityID(dst []byte, seed uint16) []byte {
	var sum [sha1.Size]byte
	if !k.communityHash(&sum, seed) {
		return dst
	}
	dst = append(dst, '1', ':')
	return base64.StdEncoding.AppendEncode(dst, sum[:])
}

// communityHash sets sum to the SHA-1 digest of the Community ID input
// of k; false for a key that is not IP.
func (k *Key) communityHash(sum *[sha1.Size]byte, seed uint16) bool {
	n := 0
	switch k.Kind {
	case KindIPv4:
		n = 4
	case KindIPv6:
		n = 16
	default:
		return false
	}
	c, _ := k.Canonical()
	var in [2 + 16 + 16 + 2 + 4]byte
	binary.BigEndian.PutUint16(in[0:], seed)
	copy(in[2:], c.Src[:n])
	copy(in[2+n:], c.Dst[:n])
	i := 2 + 2*n
	in[i], in[i+1] = c.Proto, 0
	i += 2
	if c.Flags&FlagPorts != 0 {
		binary.BigEndian.PutUint16(in[i:], c.SrcPort)
		binary.BigEndian.PutUint16(in[i+2:], c.DstPort)
		i += 4
	}
	*sum = sha1.Sum(in[:i])
	return true
}
