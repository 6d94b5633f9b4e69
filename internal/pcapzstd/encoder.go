package pcapzstd

import (
	"encoding/binary"
	"io"
	"math"
	"math/bits"

	"github.com/pcapsync/pcapsync/internal/ngheads"
)

const (
	// Window is the frame's window: no match reaches further back.
	Window = 1 << 20
	// blockSize is the most input one block holds (zstd's maximum).
	blockSize = 128 << 10
	// histCap is the most hist holds: three windows and a block.
	histCap = 3*Window + blockSize
	// denseBits is the size of greedy's table of positions.
	denseBits = 15
)

// frameHeader: the magic number, a descriptor with no content size, no
// checksum and no dictionary, and a window descriptor of 1 MiB
// (exponent 10, mantissa 0).
var frameHeader = [6]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 10 << 3}

// emptyLast is a last block of nothing (raw, size 0).
var emptyLast = [3]byte{0x01, 0x00, 0x00}

// Encoder writes one zstd frame at a time to its writer. The zero value
// is not usable: use NewEncoder.
type Encoder struct {
	w       io.Writer
	err     error
	started bool // the frame's header is written
	closed  bool

	// hist holds the frame's input from base on: the window before
	// done, then the input not yet encoded. Positions are the frame's
	// byte offsets.
	hist []byte
	base int64
	done int64 // the input before this is encoded

	// The pcapng structure, for the matches in the blocks' heads.
	heads   ngheads.Finder
	dense   [1 << denseBits]int64 // positions + 1 by the hash of 6 bytes (greedy)
	rep     [3]uint32
	seqs    []seq
	out     []byte
	lits    int
	scratch bitWriter
}

// seq is one sequence: lit literals, then a match of length ml at
// distance off (off is what the frame codes: 1 for the last distance,
// the distance plus 3 otherwise).
type seq struct {
	lit, ml, off uint32
}

// NewEncoder returns an Encoder that writes a frame to w.
func NewEncoder(w io.Writer) *Encoder {
	e := &Encoder{}
	e.Reset(w)
	return e
}

// Reset drops what the frame held and starts a new frame to w. The
// byte order of the last section header seen is kept (frames of a file
// after its first start within a section).
func (e *Encoder) Reset(w io.Writer) {
	e.w, e.err, e.started, e.closed = w, nil, false, false
	e.hist, e.base, e.done = e.hist[:0], 0, 0
	e.heads.Reset()
	e.heads.MaxDist = Window - ngheads.HeadLen - 1
	clear(e.dense[:])
	e.rep = [3]uint32{1, 4, 8}
}

// Continue drops what the encoder held and takes over a frame another
// encoder started and flushed (the library's, on a stream whose traffic
// turned random): it writes no frame header, and its matches reach only
// into what it was given itself. The other encoder's repeat offsets
// are unknown, so the last distance is not used before a distance of
// its own has set it. The frame must declare a window of at least
// Window. For the heads' matches to be found, the input must go on at
// a pcapng block's start, in the byte order of the last section header
// this encoder saw (little-endian if none: what the store writes); any
// input is still encoded correctly.
func (e *Encoder) Continue(w io.Writer) {
	e.Reset(w)
	e.started = true
	e.rep = [3]uint32{} // unknown: a distance is never 0
}

// Write adds p to the frame, encoding every full block.
func (e *Encoder) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.closed {
		return 0, ErrClosed
	}
	n := len(p)
	if cap(e.hist) == 0 && n > 0 {
		e.hist = make([]byte, 0, histCap) // grown once, not by doubling
	}
	for len(p) > 0 {
		e.slide()
		room := blockSize - int(e.base+int64(len(e.hist))-e.done)
		take := min(room, len(p))
		e.hist = append(e.hist, p[:take]...)
		p = p[take:]
		if take == room {
			if err := e.block(false); err != nil {
				return n - len(p), err
			}
		}
	}
	return n, nil
}

// slide moves the window back to the start of hist when what is kept
// before the input to encode has grown past three windows: a copy of 1
// MiB every 2 MiB of input, for a history of about 3 MiB.
func (e *Encoder) slide() {
	if e.done-e.base < 3*Window {
		return
	}
	keep := e.done - Window - e.base
	m := copy(e.hist, e.hist[keep:])
	e.hist = e.hist[:m]
	e.base += keep
}

// Flush encodes the input so far as a block, not the last: the bytes
// written so far, with an empty last block after them, are a complete
// frame.
func (e *Encoder) Flush() error {
	if e.err != nil || e.closed {
		return e.err
	}
	if e.base+int64(len(e.hist)) == e.done {
		return nil
	}
	return e.block(false)
}

// Close ends the frame with its last block. Write fails after it until
// Reset.
func (e *Encoder) Close() error {
	if e.err != nil || e.closed {
		return e.err
	}
	e.closed = true
	if e.base+int64(len(e.hist)) == e.done {
		e.out = e.header(e.out[:0])
		e.out = append(e.out, emptyLast[:]...)
		return e.write()
	}
	return e.block(true)
}

func (e *Encoder) header(dst []byte) []byte {
	if e.started {
		return dst
	}
	e.started = true
	return append(dst, frameHeader[:]...)
}

func (e *Encoder) write() error {
	if _, err := e.w.Write(e.out); err != nil {
		e.err = err
	}
	return e.err
}

// block encodes the input not yet encoded (at most blockSize) as one
// block.
func (e *Encoder) block(last bool) error {
	start, end := e.done, e.base+int64(len(e.hist))
	src := e.hist[start-e.base : end-e.base]
	e.seqs, e.lits = e.seqs[:0], 0
	rep := e.rep
	e.match(start, end)
	e.out = e.header(e.out[:0])
	hdr := len(e.out)
	e.out = append(e.out, 0, 0, 0)
	typ := uint32(2) // compressed
	if len(e.seqs) == 0 || !e.compressed(src) {
		e.out = append(e.out[:hdr+3], src...)
		typ = 0 // raw: the decoder sees none of the sequences
		e.rep = rep
	}
	size := uint32(len(e.out) - hdr - 3)
	if typ == 0 {
		size = uint32(len(src))
	}
	h := size<<3 | typ<<1
	if last {
		h |= 1
	}
	e.out[hdr], e.out[hdr+1], e.out[hdr+2] = byte(h), byte(h>>8), byte(h>>16)
	e.done = end
	return e.write()
}

// compressed appends the block's compressed form: its literals raw, its
// sequences with the predefined tables. It reports false when that is
// not smaller than the block (the caller stores it raw).
func (e *Encoder) compressed(src []byte) bool {
	begin := len(e.out)
	// Literals section: raw, its size in 5, 12 or 20 bits.
	switch n := e.lits; {
	case n < 32:
		e.out = append(e.out, byte(n<<3))
	case n < 4096:
		e.out = append(e.out, byte(n<<4|1<<2), byte(n>>4))
	default:
		e.out = append(e.out, byte(n<<4|3<<2), byte(n>>4), byte(n>>12))
	}
	pos := 0
	for _, s := range e.seqs {
		e.out = append(e.out, src[pos:pos+int(s.lit)]...)
		pos += int(s.lit) + int(s.ml)
	}
	e.out = append(e.out, src[pos:]...)
	// Sequences section: their number, the predefined modes, the stream.
	switch n := len(e.seqs); {
	case n < 128:
		e.out = append(e.out, byte(n))
	case n < 0x7f00:
		e.out = append(e.out, byte(n>>8)+0x80, byte(n))
	default:
		n -= 0x7f00
		e.out = append(e.out, 0xff, byte(n), byte(n>>8))
	}
	e.out = append(e.out, 0)
	e.scratch.out = e.out
	e.sequences(&e.scratch)
	e.out = e.scratch.out
	return len(e.out)-begin < len(src)
}

// sequences writes the bit stream of the block's sequences, last first.
func (e *Encoder) sequences(w *bitWriter) {
	n := len(e.seqs)
	var ll, ml, of fseState
	s := e.seqs[n-1]
	llc, mlc, ofc := llCode(s.lit), mlCode(s.ml), uint8(bits.Len32(s.off)-1)
	ml.init(mlTable, mlc)
	of.init(ofTable, ofc)
	ll.init(llTable, llc)
	w.add(uint64(s.lit-llBase[llc]), uint32(llBits[llc]))
	w.add(uint64(s.ml-mlBase[mlc]), uint32(mlBits[mlc]))
	w.flush()
	w.add(uint64(s.off), uint32(ofc))
	w.flush()
	// Each sequence: at most 17 bits of states, 16 of literal length and
	// 16 of match length, 20 of offset (a window of 1 MiB).
	for i := n - 2; i >= 0; i-- {
		s := e.seqs[i]
		llc, mlc, ofc := llCode(s.lit), mlCode(s.ml), uint8(bits.Len32(s.off)-1)
		of.encode(w, ofc)
		ml.encode(w, mlc)
		ll.encode(w, llc)
		w.add(uint64(s.lit-llBase[llc]), uint32(llBits[llc]))
		w.flush()
		w.add(uint64(s.ml-mlBase[mlc]), uint32(mlBits[mlc]))
		w.add(uint64(s.off), uint32(ofc))
		w.flush()
	}
	ml.flush(w)
	of.flush(w)
	ll.flush(w)
	w.close()
}

// match finds the block's sequences: in the head of every pcapng block
// that starts (or continues) in [start, end), the runs that agree with
// an earlier block's (ngheads); in a block that does not look flat,
// anywhere in the window (greedy).
func (e *Encoder) match(start, end int64) {
	dense := !flat(e.hist[start-e.base : end-e.base])
	emitted := e.heads.Find(e.hist, e.base, start, end, start, dense, (*sink)(e))
	if dense {
		emitted = e.greedy(start, end)
	}
	e.lits += int(end - emitted)
}

// sink takes ngheads' runs as sequences.
type sink Encoder

func (s *sink) Run(emitted, i, j, dist int64) {
	(*Encoder)(s).emit(uint32(i-emitted), uint32(j-i), uint32(dist))
}

// FlatBits is the entropy (bits a byte) of a sample at and above which
// bytes look random: random or encrypted payloads with their headers
// measure about 7.4 and more, text about 5.7. A block whose sample is
// below it (a stream judged flat at its start whose traffic turned to
// text) is matched everywhere, as a general zstd encoder does; the
// store judges a stream by it too.
const FlatBits = 6.5

// flat reports whether the block's bytes look random: the entropy of
// every sampleStep-th byte (4 096 of a full block), a pass of counting.
func flat(b []byte) bool {
	var hist [256]uint16
	n := 0
	for i := 0; i < len(b); i += sampleStep {
		hist[b[i]]++
		n++
	}
	if n < 256 {
		return true // too small to judge: the structure's matches suffice
	}
	// H = log2(n) - sum(c log2 c) / n
	sum := 0.0
	for _, c := range hist {
		sum += clog2[c]
	}
	return math.Log2(float64(n))-sum/float64(n) >= FlatBits
}

// sampleStep is the distance between the bytes flat counts.
const sampleStep = 32

// clog2 is c*log2(c) for every count a full block's sample can reach.
var clog2 = func() (t [blockSize/sampleStep + 1]float64) {
	for c := 1; c < len(t); c++ {
		t[c] = float64(c) * math.Log2(float64(c))
	}
	return t
}()

// hash6 is greedy's table index of the 6 bytes low in v.
func hash6(v uint64) uint64 {
	return ((v << 16) * 227718039650203) >> (64 - denseBits)
}

// greedy finds the block's matches anywhere in the window: at each
// position the last distance or the last place with the same 6 bytes
// (a table by their hash), a match taken as found and extended forward
// as far as it agrees, the
// step between tries growing while nothing matches. It returns the end
// of what is in a sequence.
func (e *Encoder) greedy(start, end int64) int64 {
	h, b := e.hist, e.base
	emitted := start
	i := start
	for i+8 <= end {
		v := binary.LittleEndian.Uint64(h[i-b:])
		k := hash6(v)
		cand := e.dense[k] - 1
		e.dense[k] = i + 1
		// The last distance first: its code is the cheapest.
		if r := int64(e.rep[0]); r > 0 && i > emitted && i-r >= b && binary.LittleEndian.Uint32(h[i-r-b:]) == uint32(v) {
			cand = i - r
		}
		if cand < b || i-cand >= Window || binary.LittleEndian.Uint32(h[cand-b:]) != uint32(v) {
			i += 1 + (i-emitted)>>6
			continue
		}
		j := i + 4
		for j+8 <= end {
			if x := binary.LittleEndian.Uint64(h[j-b:]) ^ binary.LittleEndian.Uint64(h[j-(i-cand)-b:]); x != 0 {
				j += int64(bits.TrailingZeros64(x) >> 3)
				break
			}
			j += 8
		}
		for j < end && h[j-b] == h[j-(i-cand)-b] {
			j++
		}
		// Back over what agrees before it, down to what is emitted.
		for i > emitted && cand > b && h[i-1-b] == h[cand-1-b] {
			i, cand = i-1, cand-1
		}
		e.emit(uint32(i-emitted), uint32(j-i), uint32(i-cand))
		// The match's last positions, for the next one to find.
		for p := max(j-3, i+1); p+8 <= end && p < j; p++ {
			e.dense[hash6(binary.LittleEndian.Uint64(h[p-b:]))] = p + 1
		}
		emitted, i = j, j
	}
	return emitted
}

// emit records a sequence, coding its distance with the repeat offsets
// as a decoder will have them.
func (e *Encoder) emit(lit, ml, dist uint32) {
	e.lits += int(lit)
	off := dist + 3
	if lit > 0 && dist == e.rep[0] {
		off = 1
	} else {
		e.rep = [3]uint32{dist, e.rep[0], e.rep[1]}
	}
	e.seqs = append(e.seqs, seq{lit: lit, ml: ml, off: off})
}
