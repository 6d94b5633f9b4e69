package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// The timeline summary of a closed data file (FILE.timeline,
// docs/index.md): its index's blocks spread over fixed bins of
// BinWidth, per bin the packets and bytes and the blocks that begin
// and end in it, so that a timeline whose step is a multiple of the
// width reads a few KiB a file instead of its whole index. It is
// written from the index (never from the packets) when the store
// publishes the file and by RebuildDir, and read with the same
// distrust as the index (OpenBins).
const (
	// BinsSuffix ends the name of a data file's timeline summary.
	BinsSuffix = ".timeline"
	// BinWidth is the width of a summary's bins (Unix time cut in
	// multiples of it).
	BinWidth = int64(10e9)
	// MaxBins bounds the bins of a summary (a week at BinWidth): a
	// file spanning longer (a clock that jumped) gets none.
	MaxBins = 7 * 24 * 360
	// maxBinsSize bounds a summary file: its header and MaxBins bins
	// of four varints at most.
	maxBinsSize = binsHead + MaxNameLen + MaxBins*4*binary.MaxVarintLen64 + 4
	binsMagic   = "PCSTLB01"
	binsHead    = 8 + 2 + 11*8 + 2 + 8
)

// BinsPath is the path of the timeline summary of the data file at
// dataPath.
func BinsPath(dataPath string) string { return dataPath + BinsSuffix }

// Bins is a data file's timeline summary, verified against the data
// file and its index.
type Bins struct {
	Name                string // the data file's name
	DataSize, IndexSize int64  // the data file's and its index's sizes when written
	Width               int64  // bin width (ns)
	// First and Last: the file's earliest and latest packet time
	// (First > Last: no packet).
	First, Last int64
	Blocks      int  // blocks with packets
	Final       bool // the index's end record: the fields below are set
	Codec       Codec
	// The index's last block (LastSeek, LastRaw, LastRawEnd; Blocks>0
	// or not, HasLast says whether the index has one) and the decoded
	// stream's size, for the drops of the statistics after it.
	HasLast                       bool
	LastSeek, LastRaw, LastRawEnd int64
	RawSize                       int64
	Start                         int64 // bin number of Bin[0] (its start is Start*Width)
	Bin                           []BinCounts
	Size                          int64 // the summary's bytes
}

// BinCounts is one bin of a Bins.
type BinCounts struct {
	Packets, Bytes int64
	// Firsts and Lasts: the blocks whose first (last) packet is in
	// the bin.
	Firsts, Lasts int64
}

// Share is the part of v, spread uniformly over [from, to), before ts
// (rounded down): the spread a timeline and a summary's bins share,
// so that the bins summed over an interval of whole bins give what
// spreading the blocks over it gives.
func Share(from, to, v, ts int64) int64 {
	switch {
	case ts <= from:
		return 0
	case ts >= to:
		return v
	}
	return int64(float64(v) * float64(ts-from) / float64(to-from))
}

// floorDiv is a/b rounded toward minus infinity (b > 0).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// errTooLong: a file's packets span more than MaxBins bins.
var errTooLong = errors.New("packets span more than the bins a summary holds")

// BuildBins returns the summary of ix, the index of a closed data file
// of dataSize bytes whose index is indexSize bytes.
func BuildBins(ix *Index, dataSize, indexSize int64) ([]byte, error) {
	b := Bins{Name: ix.Name, DataSize: dataSize, IndexSize: indexSize, Width: BinWidth, Final: ix.Final,
		Codec: ix.Codec, RawSize: ix.RawSize, First: 1, Last: 0}
	if n := len(ix.All); n > 0 {
		l := &ix.All[n-1]
		b.HasLast, b.LastSeek, b.LastRaw, b.LastRawEnd = true, l.Seek, l.Raw, l.RawEnd
	}
	for i := range ix.All {
		bl := &ix.All[i]
		if bl.Packets == 0 {
			continue
		}
		if b.Blocks == 0 {
			b.First, b.Last = bl.First, bl.Last
		}
		b.First, b.Last = min(b.First, bl.First), max(b.Last, bl.Last)
		b.Blocks++
	}
	if b.Blocks > 0 {
		b.Start = floorDiv(b.First, b.Width)
		nb := floorDiv(b.Last, b.Width) - b.Start + 1
		if nb > MaxBins || nb < 1 {
			return nil, errTooLong
		}
		b.Bin = make([]BinCounts, nb)
	}
	for i := range ix.All {
		bl := &ix.All[i]
		if bl.Packets == 0 {
			continue
		}
		from, to := bl.First, bl.Last+1
		b.Bin[floorDiv(bl.First, b.Width)-b.Start].Firsts++
		b.Bin[floorDiv(bl.Last, b.Width)-b.Start].Lasts++
		for k := floorDiv(from, b.Width); k*b.Width < to; k++ {
			s, e := k*b.Width, (k+1)*b.Width
			c := &b.Bin[k-b.Start]
			c.Packets += Share(from, to, int64(bl.Packets), e) - Share(from, to, int64(bl.Packets), s)
			c.Bytes += Share(from, to, bl.RawEnd-bl.Raw, e) - Share(from, to, bl.RawEnd-bl.Raw, s)
		}
	}
	return b.encode(), nil
}

func (b *Bins) encode() []byte {
	le := binary.LittleEndian
	out := append([]byte(binsMagic), 0, 0)
	le.PutUint16(out[8:], uint16(len(b.Name)))
	out = append(out, b.Name...)
	for _, v := range []int64{b.DataSize, b.IndexSize, b.Width, b.First, b.Last, b.LastSeek, b.LastRaw, b.LastRawEnd,
		b.RawSize, b.Start, int64(len(b.Bin))<<32 | int64(uint32(b.Blocks))} {
		out = le.AppendUint64(out, uint64(v))
	}
	out = append(out, boolByte(b.Final)|boolByte(b.HasLast)<<1, byte(b.Codec))
	out = le.AppendUint64(out, 0) // reserved
	for _, c := range b.Bin {
		out = binary.AppendUvarint(out, uint64(c.Packets))
		out = binary.AppendUvarint(out, uint64(c.Bytes))
		out = binary.AppendUvarint(out, uint64(c.Firsts))
		out = binary.AppendUvarint(out, uint64(c.Lasts))
	}
	return le.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// ParseBins decodes a summary, refusing (ErrDamaged) anything this
// package did not write: a wrong magic, a checksum that does not
// verify, a width other than BinWidth, counts out of bounds, bytes
// left over. It never panics (FuzzBins).
func ParseBins(p []byte) (*Bins, error) {
	le := binary.LittleEndian
	bad := func(what string) (*Bins, error) { return nil, fmt.Errorf("timeline summary: %s: %w", what, ErrDamaged) }
	if len(p) < binsHead+4 || len(p) > maxBinsSize || string(p[:8]) != binsMagic {
		return bad("not a summary")
	}
	if le.Uint32(p[len(p)-4:]) != crc32.Checksum(p[:len(p)-4], castagnoli) {
		return bad("checksum")
	}
	nl := int(le.Uint16(p[8:]))
	if nl > MaxNameLen || len(p) < binsHead+nl+4 {
		return bad("name")
	}
	b := &Bins{Name: string(p[10 : 10+nl]), Size: int64(len(p))}
	q := p[10+nl:]
	v := make([]int64, 11)
	for i := range v {
		v[i] = int64(le.Uint64(q[8*i:]))
	}
	b.DataSize, b.IndexSize, b.Width, b.First, b.Last = v[0], v[1], v[2], v[3], v[4]
	b.LastSeek, b.LastRaw, b.LastRawEnd, b.RawSize, b.Start = v[5], v[6], v[7], v[8], v[9]
	nb, blocks := uint64(v[10])>>32, uint64(v[10])&0xffffffff
	flags := q[88]
	b.Final, b.HasLast, b.Codec = flags&1 != 0, flags&2 != 0, Codec(q[89])
	b.Blocks = int(blocks)
	switch {
	case flags&^3 != 0:
		return bad("flags")
	case b.Width != BinWidth:
		return bad("bin width")
	case nb > MaxBins || (nb == 0) != (blocks == 0):
		return bad("bins")
	case b.DataSize < 0 || b.IndexSize < 0 || b.RawSize < 0 || b.LastRaw < 0 || b.LastRawEnd < b.LastRaw || b.LastSeek < 0:
		return bad("sizes")
	case blocks > 0 && (b.First > b.Last || floorDiv(b.First, b.Width) != b.Start ||
		floorDiv(b.Last, b.Width)-b.Start+1 != int64(nb)):
		return bad("times")
	}
	q = q[binsHead-10:]
	q = q[:len(q)-4]
	b.Bin = make([]BinCounts, nb)
	var firsts, lasts int64
	for i := range b.Bin {
		var c [4]int64
		for j := range c {
			x, n := binary.Uvarint(q)
			if n <= 0 || x > 1<<62 {
				return bad("bin")
			}
			c[j], q = int64(x), q[n:]
		}
		b.Bin[i] = BinCounts{Packets: c[0], Bytes: c[1], Firsts: c[2], Lasts: c[3]}
		firsts, lasts = firsts+c[2], lasts+c[3]
		if firsts > int64(blocks) || lasts > int64(blocks) {
			return bad("block counts")
		}
	}
	if len(q) != 0 {
		return bad("bytes after the bins")
	}
	return b, nil
}

// OpenBins reads the summary of the closed data file at dataPath and
// verifies it: a regular file (safefs: never through a link) trusted
// as an index is (owner and mode), of at most its bound, that parses
// (ParseBins), naming the data file with its current size and its
// index's current size. Anything else is an error; the caller reads
// the index instead.
func OpenBins(dataPath string) (*Bins, error) {
	spath := BinsPath(dataPath)
	if strings.HasSuffix(dataPath, partSuffix) {
		return nil, fmt.Errorf("%s: file still being written: %w", spath, ErrDamaged)
	}
	dst, err := os.Lstat(dataPath)
	if err != nil {
		return nil, err
	}
	ist, err := os.Lstat(Path(dataPath))
	if err != nil {
		return nil, err
	}
	if !dst.Mode().IsRegular() || !ist.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: data file or index not a regular file: %w", spath, ErrDamaged)
	}
	f, err := safefs.Open(spath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if err := trusted(st, dst); err != nil {
		return nil, fmt.Errorf("%s: %w", spath, err)
	}
	if st.Size() > maxBinsSize {
		return nil, fmt.Errorf("%s: %d bytes, at most %d: %w", spath, st.Size(), maxBinsSize, ErrDamaged)
	}
	p, err := io.ReadAll(io.LimitReader(f, maxBinsSize+1))
	if err != nil {
		return nil, err
	}
	b, err := ParseBins(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", spath, err)
	}
	if b.LastSeek > b.DataSize || b.Codec == CodecNone && max(b.LastRawEnd, b.RawSize) > b.DataSize {
		return nil, fmt.Errorf("%s: last block outside the data file: %w", spath, ErrDamaged)
	}
	if b.Name != filepath.Base(dataPath) || b.DataSize != dst.Size() || b.IndexSize != ist.Size() {
		return nil, fmt.Errorf("%s: of another file or stale: %w", spath, ErrDamaged)
	}
	return b, nil
}

// WriteBins writes the summary of the closed data file at dataPath
// from its index (OpenSummary), through a temporary file renamed over
// it (safefs.WriteReplace). It returns the bytes written.
func WriteBins(dataPath string) (int, error) {
	ix, err := OpenSummary(dataPath)
	if err != nil {
		return 0, err
	}
	dst, err := os.Lstat(dataPath)
	if err != nil {
		return 0, err
	}
	ist, err := os.Lstat(Path(dataPath))
	if err != nil {
		return 0, err
	}
	p, err := BuildBins(ix, dst.Size(), ist.Size())
	if err != nil {
		return 0, fmt.Errorf("%s: %w", BinsPath(dataPath), err)
	}
	return len(p), safefs.WriteReplace(BinsPath(dataPath), p, false)
}
