package pcapzstd

import (
	"encoding/binary"
	"math/bits"
)

// The three predefined distributions of RFC 8878 (3.1.1.3.2.2): literal
// lengths, match lengths and offsets, -1 for a symbol "less than 1".
var (
	llNorm = []int16{4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1,
		2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1,
		-1, -1, -1, -1}
	mlNorm = []int16{1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1,
		-1, -1, -1, -1, -1}
	ofNorm = []int16{1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1,
		1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1}
)

// The codes of literal and match lengths: each code's baseline and
// number of extra bits (RFC 8878 3.1.1.3.2.1.1).
var (
	llBase = [36]uint32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
		16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096,
		8192, 16384, 32768, 65536}
	llBits = [36]uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12,
		13, 14, 15, 16}
	mlBase = [53]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
		19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34,
		35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051,
		4099, 8195, 16387, 32771, 65539}
	mlBits = [53]uint8{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11,
		12, 13, 14, 15, 16}
)

// llCode is the code of a literal length (below 128 KiB).
func llCode(n uint32) uint8 {
	if n < 64 {
		return llSmall[n]
	}
	return uint8(bits.Len32(n)-1) + 19
}

// mlCode is the code of a match length of at least 3 (below 128 KiB).
func mlCode(n uint32) uint8 {
	if b := n - 3; b < 128 {
		return mlSmall[b]
	}
	return uint8(bits.Len32(n-3)-1) + 36
}

// llSmall and mlSmall are the codes of short lengths, from the tables.
var llSmall, mlSmall = func() (ll [64]uint8, ml [128]uint8) {
	c := uint8(0)
	for n := range ll {
		for c+1 < uint8(len(llBase)) && llBase[c+1] <= uint32(n) {
			c++
		}
		ll[n] = c
	}
	c = 0
	for b := range ml {
		for c+1 < uint8(len(mlBase)) && mlBase[c+1] <= uint32(b)+3 {
			c++
		}
		ml[b] = c
	}
	return ll, ml
}()

// fseTable encodes symbols with one predefined distribution: the
// encoder's state table and, per symbol, how many bits a state gives
// up and where its next state lies (the tANS construction every zstd
// encoder uses, so that the decoder's table of the same distribution
// follows the same states).
type fseTable struct {
	log    uint8
	states []uint16 // next state, by (state >> bits out) + findState
	sym    []fseSym
}

type fseSym struct {
	deltaBits  uint32 // (bits out << 16) - (the lowest state that gives them up)
	deltaState int32  // added to state >> bits out to index states
}

func newFSETable(norm []int16, log uint8) *fseTable {
	size := 1 << log
	t := &fseTable{log: log, states: make([]uint16, size), sym: make([]fseSym, len(norm))}
	// Where each symbol's states begin, "less than 1" symbols taking one
	// state each at the top of the table.
	cumul := make([]int, len(norm)+1)
	spread := make([]uint8, size)
	high := size - 1
	for s, n := range norm {
		if n == -1 {
			cumul[s+1] = cumul[s] + 1
			spread[high] = uint8(s)
			high--
		} else {
			cumul[s+1] = cumul[s] + int(n)
		}
	}
	// The decoder's spread of the other symbols over the table.
	step := size>>1 + size>>3 + 3
	pos := 0
	for s, n := range norm {
		for range max(int(n), 0) {
			spread[pos] = uint8(s)
			pos = (pos + step) & (size - 1)
			for pos > high {
				pos = (pos + step) & (size - 1)
			}
		}
	}
	next := append([]int(nil), cumul...)
	for u, s := range spread {
		t.states[next[s]] = uint16(size + u)
		next[s]++
	}
	total := 0
	for s, n := range norm {
		switch {
		case n == -1 || n == 1:
			t.sym[s] = fseSym{deltaBits: uint32(log)<<16 - uint32(size), deltaState: int32(total - 1)}
			total++
		case n > 1:
			out := uint32(log) - uint32(bits.Len32(uint32(n-1))-1)
			minPlus := uint32(n) << out
			t.sym[s] = fseSym{deltaBits: out<<16 - minPlus, deltaState: int32(total - int(n))}
			total += int(n)
		}
	}
	return t
}

var (
	llTable = newFSETable(llNorm, 6)
	mlTable = newFSETable(mlNorm, 6)
	ofTable = newFSETable(ofNorm, 5)
)

// fseState is one stream's state while encoding.
type fseState struct {
	t     *fseTable
	state uint32
}

// init starts the state at the last symbol to be encoded (the first the
// decoder reads).
func (s *fseState) init(t *fseTable, sym uint8) {
	s.t = t
	ts := t.sym[sym]
	out := (ts.deltaBits + 1<<15) >> 16
	v := out<<16 - ts.deltaBits
	s.state = uint32(t.states[int32(v>>out)+ts.deltaState])
}

// encode moves the state to sym, writing the bits it gives up.
func (s *fseState) encode(w *bitWriter, sym uint8) {
	ts := s.t.sym[sym]
	out := (s.state + ts.deltaBits) >> 16
	w.add(uint64(s.state), out)
	s.state = uint32(s.t.states[int32(s.state>>out)+ts.deltaState])
}

// flush writes the final state, which the decoder reads first.
func (s *fseState) flush(w *bitWriter) {
	w.add(uint64(s.state), uint32(s.t.log))
}

// bitWriter writes a bit stream forward, least significant bits first,
// as zstd's decoders read it backward.
type bitWriter struct {
	out  []byte
	bits uint64
	n    uint32
}

// add appends the low nb bits of v; the bits held and nb together stay
// under 64 (flush between adds that could pass that).
func (w *bitWriter) add(v uint64, nb uint32) {
	w.bits |= (v & (1<<nb - 1)) << w.n
	w.n += nb
}

// flush writes out the whole bytes held, leaving at most 7 bits.
func (w *bitWriter) flush() {
	w.out = binary.LittleEndian.AppendUint64(w.out, w.bits)
	k := w.n >> 3
	w.out = w.out[:len(w.out)-8+int(k)]
	w.bits >>= k * 8 // k is at most 7
	w.n &= 7
}

// close ends the stream with its end mark (a bit of 1) and writes out
// the last bits.
func (w *bitWriter) close() {
	w.add(1, 1)
	w.flush()
	if w.n > 0 {
		w.out = append(w.out, byte(w.bits))
		w.bits, w.n = 0, 0
	}
}
