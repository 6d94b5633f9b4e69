package wire

import "sync"

// crcJoin returns the CRC-32C of a followed by b, given the CRC-32C of
// each and b's length: a batch's checksum covers its header and then its
// records, but the encoder sums the records as it appends them (each
// piece while it is still in the cache) and learns the header last.
//
// A CRC is a polynomial remainder, so following a with n more bytes
// multiplies a's remainder by x^(8n) modulo the polynomial, and b's
// remainder is added to that. Multiplying by x^(8n) is a linear map on
// the 32 bits of the remainder: a 32x32 matrix over GF(2), one per
// power of two of n precomputed (crcShifts), applied for each bit of n.
func crcJoin(a, b uint32, n int) uint32 {
	shifts := crcShiftTable()
	for k := 0; n > 0; k, n = k+1, n>>1 {
		if n&1 != 0 {
			a = gf2Times(&shifts[k], a)
		}
	}
	return a ^ b
}

// gf2Times multiplies vector v by matrix m (m[i] is the image of bit i).
func gf2Times(m *[32]uint32, v uint32) uint32 {
	var s uint32
	for i := 0; v != 0; i, v = i+1, v>>1 {
		s ^= m[i] & -(v & 1)
	}
	return s
}

// castagnoliReversed is the CRC-32C polynomial in the bit order of Go's
// tables (least significant bit first).
const castagnoliReversed = 0x82f63b78

// crcShiftTable returns, for k = 0..62, the matrix that appends 2^k zero
// bytes to a CRC-32C remainder; made once.
var crcShiftTable = sync.OnceValue(func() *[63][32]uint32 {
	var t [63][32]uint32
	// One zero bit: the remainder shifts right one place, the
	// polynomial folded in where a one falls off.
	var bit [32]uint32
	bit[0] = castagnoliReversed
	for i := 1; i < 32; i++ {
		bit[i] = 1 << (i - 1)
	}
	// Squaring a matrix doubles the zeros it appends: 2, 4, then 8
	// bits, one byte.
	m := bit
	for range 3 {
		m = gf2Square(&m)
	}
	t[0] = m
	for k := 1; k < len(t); k++ {
		t[k] = gf2Square(&t[k-1])
	}
	return &t
})

func gf2Square(m *[32]uint32) [32]uint32 {
	var sq [32]uint32
	for i := range sq {
		sq[i] = gf2Times(m, m[i])
	}
	return sq
}
