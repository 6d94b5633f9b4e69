package pcapflate

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"math/bits"

	"github.com/pcapsync/pcapsync/internal/ngheads"
)

const (
	// window is deflate's: no match reaches further back.
	window = 32 << 10
	// chunk is the most input encoded at a time.
	chunk = 128 << 10
	// keepBack is how far the history grows before it is moved back to
	// its last window: a copy of 32 KiB every MiB of input.
	keepBack = 1 << 20
	// histCap is the most the history holds.
	histCap = keepBack + window + chunk
	// maxMatch is deflate's longest match.
	maxMatch = 258
	// storedMin is the shortest run of literals put in a stored block:
	// switching from a coded block to a stored one and back costs about
	// 6 bytes (the end code, two headers, the padding to a byte and the
	// stored block's lengths), and the fixed codes spend 8.44 bits on a
	// random byte, 5.5% more than it holds.
	storedMin = 128
	// outFlush is how much output is gathered before it is written.
	outFlush = 64 << 10
)

// header is a gzip member's: no name, no time, XFL 4 (the fastest), OS
// 3 (Unix, as gzip(1) writes there; Go's gzip writers say 255, unknown,
// which tells a member of this encoder from theirs).
var header = [10]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3}

// Encoder writes one gzip member at a time to its writer. The zero
// value is not usable: use NewEncoder.
type Encoder struct {
	w       io.Writer
	err     error
	started bool // the member's header is written
	closed  bool

	// hist holds the member's input from base on: the window before
	// done, then the input not yet encoded. Positions are the member's
	// byte offsets.
	hist []byte
	base int64
	done int64
	crc  uint32
	size uint32

	// The pcapng structure, for the matches in the blocks' heads.
	heads ngheads.Finder

	// The deflate stream: bits not yet whole bytes, and whether a block
	// with the fixed codes is open.
	out   []byte
	acc   uint64
	nacc  uint
	fixed bool
}

// NewEncoder returns an Encoder that writes a member to w.
func NewEncoder(w io.Writer) *Encoder {
	e := &Encoder{}
	e.Reset(w)
	return e
}

// Reset drops what the member held and starts a new member to w. The
// byte order of the last section header seen is kept (members of a
// file after its first start within a section).
func (e *Encoder) Reset(w io.Writer) {
	e.w, e.err, e.started, e.closed = w, nil, false, false
	e.hist, e.base, e.done, e.crc, e.size = e.hist[:0], 0, 0, 0, 0
	e.heads.Reset()
	e.heads.MaxDist = window
	e.out, e.acc, e.nacc, e.fixed = e.out[:0], 0, 0, false
}

// Write adds p to the member, encoding every full chunk.
func (e *Encoder) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.closed {
		return 0, ErrClosed
	}
	n := len(p)
	if cap(e.hist) == 0 && n > 0 {
		e.hist = make([]byte, 0, histCap)
		e.out = make([]byte, 0, outFlush+chunk+chunk/8)
	}
	e.crc = crc32.Update(e.crc, crc32.IEEETable, p)
	e.size += uint32(n)
	for len(p) > 0 {
		e.slide()
		room := chunk - int(e.base+int64(len(e.hist))-e.done)
		take := min(room, len(p))
		e.hist = append(e.hist, p[:take]...)
		p = p[take:]
		if take == room {
			e.encode()
			if len(e.out) >= outFlush {
				if err := e.write(); err != nil {
					return n - len(p), err
				}
			}
		}
	}
	return n, nil
}

// slide moves the last window of history to the start of hist once
// what is kept before the input to encode has grown past keepBack.
func (e *Encoder) slide() {
	if e.done-e.base < keepBack {
		return
	}
	keep := e.done - window - e.base
	m := copy(e.hist, e.hist[keep:])
	e.hist = e.hist[:m]
	e.base += keep
}

// Close encodes what is left, ends the deflate stream and writes the
// member's trailer. Write fails after it until Reset.
func (e *Encoder) Close() error {
	if e.err != nil || e.closed {
		return e.err
	}
	e.closed = true
	e.encode()
	if e.fixed {
		e.bits(0, 7) // end of block
	}
	e.bits(3, 3) // the last block: fixed codes,
	e.bits(0, 7) // empty
	e.align()
	e.out = binary.LittleEndian.AppendUint32(e.out, e.crc)
	e.out = binary.LittleEndian.AppendUint32(e.out, e.size)
	return e.write()
}

func (e *Encoder) write() error {
	if _, err := e.w.Write(e.out); err != nil {
		e.err = err
	}
	e.out = e.out[:0]
	return e.err
}

// encode codes the input not yet encoded: in the head and tail of every
// pcapng block that starts (or continues) in it, the runs that agree
// with an earlier block's (ngheads); everything else as literals.
func (e *Encoder) encode() {
	if !e.started {
		e.started = true
		e.out = append(e.out, header[:]...)
	}
	start, end := e.done, e.base+int64(len(e.hist))
	emitted := e.heads.Find(e.hist, e.base, start, end, start, false, (*sink)(e))
	e.literals(e.hist[emitted-e.base : end-e.base])
	e.done = end
}

// sink codes ngheads' runs: the literals before each, then the match.
type sink Encoder

func (s *sink) Run(emitted, i, j, dist int64) {
	e := (*Encoder)(s)
	e.literals(e.hist[emitted-e.base : i-e.base])
	e.match(int(j-i), int(dist))
}

// literals codes p: in stored blocks when it is long, else with the
// fixed codes.
func (e *Encoder) literals(p []byte) {
	if len(p) >= storedMin {
		e.stored(p)
		return
	}
	if len(p) == 0 {
		return
	}
	e.openFixed()
	for _, c := range p {
		l := litCodes[c]
		e.bits(uint64(l.code), uint(l.n))
	}
}

// stored puts p in stored blocks of at most 65 535 bytes.
func (e *Encoder) stored(p []byte) {
	if e.fixed {
		e.bits(0, 7) // end of block
		e.fixed = false
	}
	for len(p) > 0 {
		n := min(len(p), 0xffff)
		e.bits(0, 3) // not the last; stored
		e.align()
		e.out = append(e.out, byte(n), byte(n>>8), ^byte(n), ^byte(n>>8))
		e.out = append(e.out, p[:n]...)
		p = p[n:]
	}
}

func (e *Encoder) openFixed() {
	if !e.fixed {
		e.bits(2, 3) // not the last; fixed codes
		e.fixed = true
	}
}

// match codes a match of length n at distance dist (at most window).
func (e *Encoder) match(n, dist int) {
	e.openFixed()
	dc, dn, dx := distCode(dist)
	for n > 0 {
		take := min(n, maxMatch)
		if n > maxMatch && n-maxMatch < 3 {
			take = n - 3 // leave a match deflate can code
		}
		l := lenCodes[take]
		e.bits(uint64(l.code), uint(l.n))
		e.bits(uint64(dc)|uint64(dx)<<5, 5+uint(dn))
		n -= take
	}
}

// bits adds the n low bits of v (n at most 32) to the stream.
func (e *Encoder) bits(v uint64, n uint) {
	e.acc |= v << e.nacc
	e.nacc += n
	if e.nacc >= 32 {
		e.out = binary.LittleEndian.AppendUint32(e.out, uint32(e.acc))
		e.acc >>= 32
		e.nacc -= 32
	}
}

// align writes out the bits held, padded with zeros to a byte.
func (e *Encoder) align() {
	for e.nacc > 0 {
		e.out = append(e.out, byte(e.acc))
		e.acc >>= 8
		e.nacc -= min(8, e.nacc)
	}
	e.acc = 0
}

// code is a Huffman code, bits reversed for the LSB-first stream, with
// any extra bits after it.
type code struct {
	code uint32
	n    uint8
}

// litCodes: the fixed codes of the literals (RFC 1951 3.2.6).
var litCodes = func() (t [256]code) {
	for c := range 256 {
		if c < 144 {
			t[c] = rev(0x30+uint32(c), 8)
		} else {
			t[c] = rev(0x190+uint32(c-144), 9)
		}
	}
	return t
}()

// lenCodes: the fixed code and extra bits of every match length.
var lenCodes = func() (t [maxMatch + 1]code) {
	for l := 3; l <= maxMatch; l++ {
		x := uint32(l - 3)
		var sym, nx, xv uint32
		switch {
		case l == maxMatch:
			sym = 285
		case x < 8:
			sym = 257 + x
		default:
			hb := uint32(bits.Len32(x)) - 1 // 3 and up
			nx = hb - 2
			sym = 257 + 4*(hb-1) + (x>>nx)&3
			xv = x & (1<<nx - 1)
		}
		var c code
		if sym < 280 {
			c = rev(sym-256, 7)
		} else {
			c = rev(0xc0+sym-280, 8)
		}
		t[l] = code{code: c.code | xv<<c.n, n: c.n + uint8(nx)}
	}
	return t
}()

// distCode returns a distance's fixed code (reversed), its number of
// extra bits and their value.
func distCode(d int) (uint32, uint32, uint32) {
	x := uint32(d - 1)
	if x < 4 {
		return distRev[x], 0, 0
	}
	hb := uint32(bits.Len32(x)) - 1 // 2 and up
	nx := hb - 1
	return distRev[2*hb+(x>>nx)&1], nx, x & (1<<nx - 1)
}

// distRev: the 5-bit distance codes, bits reversed.
var distRev = func() (t [30]uint32) {
	for c := range uint32(30) {
		t[c] = rev(c, 5).code
	}
	return t
}()

func rev(c uint32, n uint8) code {
	return code{code: bits.Reverse32(c) >> (32 - n), n: n}
}
