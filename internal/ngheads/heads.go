// Package ngheads finds the repeats of a pcapng stream whose packets do
// not compress beyond their headers (random or encrypted payloads): in
// the head of each pcapng block (the block's fields and the packet's
// first bytes: link, network and transport headers) and in its last
// bytes (padding and the block's length again), the runs that agree
// with an earlier block of the same length and the same bytes where
// IPv4 over Ethernet keeps its addresses, or else the block before. It
// is the matcher that internal/pcapzstd and internal/pcapflate share:
// each codes what it finds in its own format.
//
// The input need not be pcapng: it is parsed as a sequence of blocks (a
// type and a total length of 4 bytes each, in the byte order of the
// section's header), and where a length is implausible no more matches
// are found in the stream. A run is reported only where the bytes agree,
// so what a caller codes is correct for any input.
package ngheads

import (
	"encoding/binary"
	"math/bits"
)

const (
	// MinMatch is the shortest run reported. Every match costs its
	// codec a code of a few bytes and most of the encoder's time; runs
	// of 4 and 5 bytes between two fields that differ (an IP header's
	// identification and checksum) save little: at 6 pcapzstd is about
	// a quarter faster on IMIX and its output 1.7% larger than at 4.
	MinMatch = 6
	// HeadLen is how much of a block's start is compared with the
	// earlier block: the pcapng block's own fields (28 bytes for an
	// enhanced packet block) and the packet's first 100 bytes. A run
	// that reaches its end goes on as far as the bytes agree.
	HeadLen = 128
	// tailLen is how much of a block's end is compared too: an enhanced
	// packet block's padding and its total length, repeated.
	tailLen = 8
	// maxRecord is the longest pcapng block believed: a longer length
	// (or one not a multiple of 4, or under 12) loses the structure.
	maxRecord = 16 << 20
	// tableBits is the size of the table of earlier blocks by key.
	tableBits = 12
)

// Sink takes the runs a Finder reports, in order: the input from
// emitted to i is not in a run (literals), [i, j) agrees with the bytes
// dist before it.
type Sink interface {
	Run(emitted, i, j, dist int64)
}

// Finder follows one stream's pcapng blocks. Positions are the
// stream's byte offsets; the caller holds the stream's bytes from some
// base on.
type Finder struct {
	// MaxDist is the farthest back a compared block may start.
	MaxDist int64

	next   int64 // the next block's start
	lost   bool  // a length was implausible: no more runs this stream
	last   int64 // the last block seen
	lastOK bool
	big    bool // the section's byte order is big-endian
	table  [1 << tableBits]int64
}

// Reset starts a new stream at offset 0, a block's start. The byte order
// of the last section header seen is kept (a stream of a file after its
// first starts within a section).
func (f *Finder) Reset() {
	f.next, f.lost, f.last, f.lastOK = 0, false, 0, false
	clear(f.table[:])
}

// Find reports to s, in order, the runs in the blocks that start or
// continue in [start, end), where h holds the stream from base to end.
// With structOnly it follows the blocks (for later ones to compare
// with) but reports nothing. It returns the end of what is in a run:
// emitted, or the end of the last run reported.
func (f *Finder) Find(h []byte, base, start, end, emitted int64, structOnly bool, s Sink) int64 {
	for !f.lost && f.next < end {
		r := f.next
		if r+8 > end {
			break // the block's fields are not written yet
		}
		typ, length := f.fields(h, base, r)
		if typ == 0x0a0d0d0a { // a section header: its byte order first
			if r+12 > end {
				break
			}
			f.order(h, base, r)
			_, length = f.fields(h, base, r)
		}
		if length < 12 || length%4 != 0 || length > maxRecord {
			f.lost = true
			break
		}
		f.next = r + int64(length)
		cand, ok := f.candidate(h, base, r, int64(length), end)
		if ok && !structOnly && r+int64(length) > start {
			dist, rend := r-cand, r+int64(length)
			limit := min(rend, end) // a run may go on to here
			head := min(r+min(int64(length), HeadLen), limit)
			emitted = runs(h, base, dist, max(r, start), head, limit, emitted, s)
			if tail := max(rend-tailLen, emitted, start); tail < limit {
				emitted = runs(h, base, dist, tail, limit, limit, emitted, s)
			}
		}
		f.last, f.lastOK = r, true
	}
	return emitted
}

// fields reads a pcapng block's type and total length at r.
func (f *Finder) fields(h []byte, base, r int64) (uint32, uint32) {
	b := h[r-base : r-base+8]
	if f.big {
		return binary.BigEndian.Uint32(b), binary.BigEndian.Uint32(b[4:])
	}
	return binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
}

// order takes the byte order of the section header at r.
func (f *Finder) order(h []byte, base, r int64) {
	switch binary.LittleEndian.Uint32(h[r-base+8:]) {
	case 0x1a2b3c4d:
		f.big = false
	case 0x4d3c2b1a:
		f.big = true
	}
}

// candidate picks the earlier block that r's head is compared with: the
// last one of the same length and the same 8 bytes 54 bytes in (an
// enhanced packet block's IPv4 addresses over Ethernet), else the one
// before r; either at most MaxDist back and still held. It records r
// under its key.
func (f *Finder) candidate(h []byte, base, r, length, avail int64) (int64, bool) {
	key := uint64(length)
	if k := r + 54; k+8 <= min(avail, r+length) {
		key ^= binary.LittleEndian.Uint64(h[k-base:])
	}
	i := (key * 0x9e3779b97f4a7c15) >> (64 - tableBits)
	prev := f.table[i] - 1
	f.table[i] = r + 1
	if prev >= 0 && r-prev <= f.MaxDist && prev >= base {
		return prev, true
	}
	if f.lastOK && r-f.last <= f.MaxDist && f.last >= base {
		return f.last, true
	}
	return 0, false
}

// runs reports the runs of at least MinMatch bytes that begin in [from,
// stop) between the input and the bytes dist before it (a run that
// reaches stop goes on while the bytes agree, up to limit). It returns
// the new end of what is in a run. A run is a maximal stretch of bytes
// that agree: it starts at from or after a byte that differs.
//
// It compares 8 bytes at a time: which of them agree, exactly (no
// borrow between bytes), whether 6 in a row do, alone or with those
// that agreed at the end of the word before.
func runs(h []byte, b, dist, from, stop, limit, emitted int64, s Sink) int64 {
	const lo7, hi = 0x7f7f7f7f7f7f7f7f, 0x8080808080808080
	i, carry := from, int64(0) // carry: bytes agreeing just before i, from i-carry on
	for i < stop && i+8 <= limit {
		x := binary.LittleEndian.Uint64(h[i-b:]) ^ binary.LittleEndian.Uint64(h[i-dist-b:])
		diff := (((x & lo7) + lo7) | x) & hi // the top bit of each byte that differs
		lead := int64(bits.TrailingZeros64(diff) >> 3)
		start := int64(-1)
		if carry+lead >= MinMatch {
			start = i - carry
		} else if eq := ^diff & hi; eq != 0 {
			if six := eq & (eq >> 8) & (eq >> 16) & (eq >> 24) & (eq >> 32) & (eq >> 40); six != 0 {
				start = i + int64(bits.TrailingZeros64(six)>>3)
			}
		}
		if start < 0 {
			carry = int64(bits.LeadingZeros64(diff) >> 3)
			i += 8
			continue
		}
		if start >= stop {
			return emitted
		}
		j := extend(h, b, dist, start+MinMatch, limit)
		s.Run(emitted, start, j, dist)
		emitted, i, carry = j, j, 0
	}
	// The last bytes, fewer than 8 before limit: one at a time, from the
	// start of the run that reaches them.
	for i -= carry; i < stop; {
		for i < stop && h[i-b] != h[i-dist-b] {
			i++
		}
		if i >= stop {
			break
		}
		j := extend(h, b, dist, i+1, limit)
		if j-i >= MinMatch {
			s.Run(emitted, i, j, dist)
			emitted = j
		}
		i = j
	}
	return emitted
}

// extend returns where the bytes that agree from j on (with those dist
// before them) stop agreeing, at most limit.
func extend(h []byte, b, dist, j, limit int64) int64 {
	for j+8 <= limit {
		if x := binary.LittleEndian.Uint64(h[j-b:]) ^ binary.LittleEndian.Uint64(h[j-dist-b:]); x != 0 {
			return j + int64(bits.TrailingZeros64(x)>>3)
		}
		j += 8
	}
	for j < limit && h[j-b] == h[j-dist-b] {
		j++
	}
	return j
}
