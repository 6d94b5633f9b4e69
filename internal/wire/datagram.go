package wire

import "fmt"

// Datagrams (the UDP transport). A datagram carries one or more whole
// frames back to back, exactly as on a stream, and nothing else:
//
//	+--------+-----------+--------+-----------+-----
//	| header | payload   | header | payload   | ...   (ends with a frame)
//	+--------+-----------+--------+-----------+-----
//
// A frame never spans two datagrams, and at most one frame of a datagram
// is sequenced, a batch or a piece of one (see AppendPiece): its
// sequence number (a batch's seq, a piece's first + index) is the
// datagram's, by which the collector counts lost, reordered and
// duplicated datagrams. A datagram that breaks a rule (a bad header, a
// length past its end, bytes after the last frame, two sequenced
// frames) is dropped whole.
//
// The agent keeps every datagram within its path MTU (IPv4: MTU - 28
// bytes of IP and UDP headers; IPv6: MTU - 48), so IP never fragments
// one: a batch frame that does not fit (one packet larger than a
// datagram) travels in pieces. MaxDatagram bounds every datagram.

// MaxDatagram is the largest UDP payload: 65535 minus the IPv4 and UDP
// headers. (IPv6 could carry 20 bytes more; pcapsync never uses them.)
const MaxDatagram = 65535 - 20 - 8

// DatagramOverhead returns the bytes of IP and UDP headers a datagram
// to or from an IPv6 (v6 true) or IPv4 address costs against the MTU.
func DatagramOverhead(v6 bool) int {
	if v6 {
		return 40 + 8
	}
	return 20 + 8
}

// CheckDatagram checks that d holds only whole frames, each with a good
// header (see ParseHeader) and at most one of them a batch or piece, and returns
// the number of frames. It reads headers only; payloads are checked by
// their parsers. It allocates nothing.
func CheckDatagram(d []byte, lim Limits) (frames int, err error) {
	sequenced := 0
	for len(d) > 0 {
		h, _, rest, err := NextFrame(d, lim)
		if err != nil {
			return frames, fmt.Errorf("datagram frame %d: %w", frames, err)
		}
		if h.Type == TypeBatch || h.Type == TypePiece {
			if sequenced++; sequenced > 1 {
				return frames, fmt.Errorf("datagram frame %d: a second batch or piece: %w", frames, ErrMalformed)
			}
		}
		frames++
		d = rest
	}
	if frames == 0 {
		return 0, fmt.Errorf("empty datagram: %w", ErrTruncated)
	}
	return frames, nil
}

// NextFrame decodes the frame at the start of d and returns its header,
// its payload (aliasing d, capped) and the bytes after it.
func NextFrame(d []byte, lim Limits) (h Header, payload, rest []byte, err error) {
	if len(d) < HeaderSize {
		return h, nil, nil, fmt.Errorf("%d bytes, a frame header needs %d: %w", len(d), HeaderSize, ErrTruncated)
	}
	if h, err = ParseHeader((*[HeaderSize]byte)(d), lim); err != nil {
		return h, nil, nil, err
	}
	d = d[HeaderSize:]
	if uint64(h.Length) > uint64(len(d)) {
		return h, nil, nil, fmt.Errorf("%s payload of %d bytes, %d left: %w", h.Type, h.Length, len(d), ErrTruncated)
	}
	n := int(h.Length)
	return h, d[:n:n], d[n:], nil
}
