package index

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Block is one block of a data file, as its index describes it.
type Block struct {
	Seek        int64 // data file offset where a decoder starts for it (see Span)
	Raw, RawEnd int64 // its range in the decoded pcapng stream
	First, Last int64 // earliest and latest packet time (Unix ns); 0 without packets
	Packets     int
	// Ordered: its packets are in time order, each no earlier than the
	// one before it in the file (version 5 on; false before). A claim
	// of the index, like First: a reader that relies on it checks it.
	Ordered bool
	Ifaces  int // interfaces described in the stream before RawEnd
	Keys    int // distinct keys in its filter
	filter  []uint64
}

// Index is the index of one data file, verified. It is read-only and
// safe for concurrent use.
type Index struct {
	Version    int    // the format's version (MinVersion..Version)
	Name       string // the data file's final name
	Codec      Codec
	HeadIfaces int // interfaces the data file's head describes
	BlockBytes int
	All        []Block // in file order
	// Final: the index holds its end record; the data file was closed
	// and the fields below are set.
	Final    bool
	DataSize int64
	RawSize  int64
	Ifaces   int
	// Probed: the data file bytes Open read to verify the index
	// (Verify).
	Probed int64
	// Summary: read by OpenSummary, without the blocks' filters:
	// Select and MayMatch take every block as matching every key,
	// Verify refuses it, and Append does not give the file back.
	Summary bool
}

// KeysARP reports whether the filters hold the IPv4 addresses of ARP
// and RARP packets (version 2 on): an index of version 1 answers a
// Host match for blocks of IPv4 packets only.
func (ix *Index) KeysARP() bool { return ix.Version >= 2 }

// KeysWide reports whether the filters hold every key libpcap's host,
// port and protocol primitives can match in a block's packets
// (WideVersion on; format.go): only then may Select be given a Match.
// The filters of older versions may miss packets whose headers are
// cut short or inconsistent; a reader selects their blocks by time
// only, and RebuildDir rebuilds them.
func (ix *Index) KeysWide() bool { return ix.Version >= WideVersion }

// Open reads and verifies the index of the data file at dataPath (a
// finished file or one ending in ".part", still being written). It
// fails with an error wrapping ErrDamaged, ErrVersion, ErrMismatch,
// ErrUnfinished or ErrUntrusted when the index must not be used,
// safefs.ErrLink or safefs.ErrNotRegular when the index or the data
// file is a link, FIFO or device (never opened blocking), or
// fs.ErrNotExist when there is none: the caller then reads the data
// file without it. The index of a ".part" file holds the blocks written
// so far; that of a finished file must be complete and match the data
// file's size.
//
// Nothing the index says is taken on trust: the file must belong to a
// trusted user (trusted), is refused unread when it is larger than
// MaxSize of its data file, so the memory it takes is bounded by the
// data file's size whatever it claims, every block must lie within the
// data file (Check), and the blocks Verify probes (every block of a
// plain file) must agree with the data at their offsets. The data read
// to verify it is counted in Probed.
func Open(dataPath string) (*Index, error) {
	df, f, limit, err := openPair(dataPath)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	defer f.Close()
	ipath := Path(dataPath)
	// The file may grow after the Stat: read at most limit+1 bytes.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("reading index %s: %w", ipath, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("index %s: over %d bytes: %w", ipath, limit, ErrDamaged)
	}
	live := strings.HasSuffix(dataPath, partSuffix)
	ix, err := Parse(b, live)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", ipath, err)
	}
	dsize, err := checkData(df, dataPath, ix)
	if err != nil {
		return nil, err
	}
	ix.Probed, err = ix.Verify(df, dsize)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", ipath, err)
	}
	return ix, nil
}

// openPair opens the data file at dataPath and its index, and checks
// that the index may be believed (trusted) and is not larger than
// MaxSize allows (limit).
func openPair(dataPath string) (df, f *os.File, limit int64, err error) {
	ipath := Path(dataPath)
	if df, err = safefs.Open(dataPath); err != nil {
		return nil, nil, 0, err
	}
	fail := func(e error) (*os.File, *os.File, int64, error) {
		df.Close()
		if f != nil {
			f.Close()
		}
		return nil, nil, 0, e
	}
	dst, err := df.Stat()
	if err != nil {
		return fail(err)
	}
	if f, err = safefs.Open(ipath); err != nil {
		return fail(err)
	}
	st, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if err := trusted(st, dst); err != nil {
		return fail(fmt.Errorf("index %s: %w", ipath, err))
	}
	limit = MaxSize(dst.Size(), CodecOf(dataPath))
	if st.Size() > limit {
		return fail(fmt.Errorf("index %s: %d bytes for a %d-byte data file, at most %d: %w", ipath, st.Size(), dst.Size(), limit, ErrDamaged))
	}
	return df, f, limit, nil
}

// checkData checks ix against its data file df at dataPath (Check) and
// returns the data file's size.
func checkData(df *os.File, dataPath string, ix *Index) (int64, error) {
	// The data of a file being written is written before its index:
	// its size now covers what the index read describes.
	dst, err := df.Stat()
	if err != nil {
		return 0, err
	}
	live := strings.HasSuffix(dataPath, partSuffix)
	if err := ix.Check(filepath.Base(strings.TrimSuffix(dataPath, partSuffix)), dst.Size(), live); err != nil {
		return 0, fmt.Errorf("index %s: %w", Path(dataPath), err)
	}
	return dst.Size(), nil
}

// MaxSize is the largest index Open reads for a data file of dataSize
// bytes compressed with c (as CodecOf names it): 1 MiB plus an eighth
// of a plain file, plus twice a compressed one, at most MaxFileSize.
// The index the store writes takes, per block of at least 4 KiB
// decoded (store.MinIndexBlock), a record of 73 bytes and a filter
// within 2% of the block's bytes on disk: under 4% of a plain file,
// and of a compressed file 2% plus its compression ratio over 56 (with
// the default 512 KiB blocks, about 2%); twice the file leaves room
// for 4 KiB blocks compressed 100:1. What Parse makes of an index
// is about three times its size at most, so an index's memory is
// bounded by its data file whatever it claims.
func MaxSize(dataSize int64, c Codec) int64 {
	dataSize = max(dataSize, 0)
	share := 2 * dataSize
	if c == CodecNone {
		share = dataSize / 8
	}
	return min(MaxFileSize, 1<<20+share)
}

// Check verifies that ix describes data file name of size bytes (live:
// still being written, so possibly grown since).
func (ix *Index) Check(name string, size int64, live bool) error {
	if ix.Name != name {
		return fmt.Errorf("written for %q, not %q: %w", ix.Name, name, ErrMismatch)
	}
	if ix.Final {
		if ix.DataSize != size && !(live && ix.DataSize < size) {
			return fmt.Errorf("data file of %d bytes, indexed at %d: %w", size, ix.DataSize, ErrMismatch)
		}
		return ix.checkBlocks(ix.DataSize)
	}
	if !live {
		return ErrUnfinished
	}
	return ix.checkBlocks(size)
}

// checkBlocks verifies that every block lies within a data file of size
// bytes (of a file being written: as large as it was when looked at),
// in order, its counts of packets and new interfaces within its bytes:
// Seek within the file and never going back, for a plain file
// Seek at Raw and RawEnd within the file, and, with the end record,
// RawEnd within the decoded size (for a plain file the file's size).
func (ix *Index) checkBlocks(size int64) error {
	if ix.Final && ix.Codec == CodecNone && ix.RawSize != ix.DataSize {
		return fmt.Errorf("plain data file of %d bytes decoded to %d: %w", ix.DataSize, ix.RawSize, ErrMismatch)
	}
	prev, ifaces := int64(0), ix.HeadIfaces
	for i := range ix.All {
		b := &ix.All[i]
		switch {
		case int64(b.Packets)*minPacketBlock+int64(b.Ifaces-ifaces)*minIfaceBlock > b.RawEnd-b.Raw:
			return fmt.Errorf("block %d: %d packets and %d interfaces in %d bytes: %w", i, b.Packets, b.Ifaces-ifaces, b.RawEnd-b.Raw, ErrMismatch)
		case b.Seek < prev || b.Seek >= max(size, 1) && ix.Codec != CodecZstd:
			return fmt.Errorf("block %d at offset %d of a %d-byte data file: %w", i, b.Seek, size, ErrMismatch)
		case ix.Codec == CodecZstd && b.Seek != 0:
			return fmt.Errorf("block %d of a one-frame zstd file at offset %d: %w", i, b.Seek, ErrMismatch)
		case ix.Codec == CodecNone && (b.Seek != b.Raw || b.RawEnd > size):
			return fmt.Errorf("block %d: bytes %d to %d of a %d-byte data file: %w", i, b.Raw, b.RawEnd, size, ErrMismatch)
		case ix.Final && b.RawEnd > ix.RawSize:
			return fmt.Errorf("block %d ends at %d of a %d-byte stream: %w", i, b.RawEnd, ix.RawSize, ErrMismatch)
		}
		prev, ifaces = b.Seek, max(ifaces, b.Ifaces)
	}
	return nil
}

// The smallest pcapng packet and interface blocks: a block's counts
// must fit its bytes.
const (
	minPacketBlock = 32
	minIfaceBlock  = 20
)

// Parse decodes an index file's bytes. With partial, a torn or damaged
// tail (an index still being written, or cut by a crash) ends the index
// where the last good record ends; without it, every byte must verify.
// The returned Index keeps no reference to b.
func Parse(b []byte, partial bool) (*Index, error) {
	le := binary.LittleEndian
	ix, crc, hl, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	words := 0
	type span struct{ off, n int }
	var filters []span
	p := b[hl:]
	off := hl
	torn := func(what string) error {
		if partial {
			return nil
		}
		return fmt.Errorf("record at offset %d: %s: %w", off, what, ErrDamaged)
	}
	for len(p) > 0 {
		if ix.Final {
			if err := torn("bytes after the end record"); err != nil {
				return nil, err
			}
			break
		}
		if len(p) < recHead+4 {
			if err := torn("truncated"); err != nil {
				return nil, err
			}
			break
		}
		n := int64(le.Uint32(p[1:]))
		if n > int64(len(p)-recHead-4) {
			if err := torn("truncated"); err != nil {
				return nil, err
			}
			break
		}
		rec := p[:recHead+n]
		next := crc32.Update(crc, castagnoli, rec)
		if le.Uint32(p[recHead+n:]) != next {
			if err := torn("checksum"); err != nil {
				return nil, err
			}
			break
		}
		pl := rec[recHead:]
		switch p[0] {
		case kindBlock:
			blk, w, err := decodeBlock(pl, len(pl), ix.Version, ix.All)
			if err != nil {
				return nil, err
			}
			filters = append(filters, span{off + recHead + blockFixed, w})
			words += w
			ix.All = append(ix.All, blk)
		case kindEnd:
			if err := ix.decodeEnd(pl); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("record kind %#x: %w", p[0], ErrDamaged)
		}
		crc = next
		step := recHead + int(n) + 4
		p, off = p[step:], off+step
	}
	all := make([]uint64, words)
	for i, s := range filters {
		f := all[:s.n:s.n]
		all = all[s.n:]
		for j := range f {
			f[j] = le.Uint64(b[s.off+8*j:])
		}
		ix.All[i].filter = f
	}
	return ix, nil
}

// parseHeader decodes the index header at the start of b: the Index
// it starts, its checksum (the seed of the first record's) and its
// length with the checksum.
func parseHeader(b []byte) (*Index, uint32, int, error) {
	le := binary.LittleEndian
	if len(b) < headerFixed+4 || [4]byte(b[:4]) != magic {
		return nil, 0, 0, fmt.Errorf("no index header: %w", ErrDamaged)
	}
	if b[4] < MinVersion || b[4] > Version {
		return nil, 0, 0, fmt.Errorf("version %d: %w", b[4], ErrVersion)
	}
	name, ok := headerName(b)
	if !ok {
		return nil, 0, 0, fmt.Errorf("header: %w", ErrDamaged)
	}
	h := headerFixed + len(name)
	ix := &Index{Version: int(b[4]), Name: name, Codec: Codec(b[5]), HeadIfaces: int(le.Uint16(b[6:])), BlockBytes: int(le.Uint32(b[8:]))}
	if ix.Codec > CodecZstdFrames || ix.Codec == CodecZstdFrames && ix.Version < 3 {
		return nil, 0, 0, fmt.Errorf("codec %d in version %d: %w", ix.Codec, ix.Version, ErrDamaged)
	}
	return ix, le.Uint32(b[h:]), h + 4, nil
}

// decodeBlock decodes a block record's payload of n bytes, whose first
// bytes (at least its fixed part, if n is) are pl, of an index of the
// version given, following the blocks before: the block and its
// filter's size in words.
func decodeBlock(pl []byte, n, version int, before []Block) (Block, int, error) {
	le := binary.LittleEndian
	if n < blockFixed {
		return Block{}, 0, fmt.Errorf("block record of %d bytes: %w", n, ErrDamaged)
	}
	w := int(le.Uint32(pl[52:]))
	if w > maxWords || n != blockFixed+8*w {
		return Block{}, 0, fmt.Errorf("block record of %d bytes with %d filter words: %w", n, w, ErrDamaged)
	}
	blk := Block{
		Seek: int64(le.Uint64(pl[0:])), Raw: int64(le.Uint64(pl[8:])), RawEnd: int64(le.Uint64(pl[16:])),
		First: int64(le.Uint64(pl[24:])), Last: int64(le.Uint64(pl[32:])),
		Packets: int(le.Uint32(pl[40:])), Ifaces: int(le.Uint32(pl[44:])), Keys: int(le.Uint32(pl[48:])),
	}
	if version >= OrderedVersion {
		blk.Ordered = blk.Packets&orderedBit != 0
		blk.Packets &^= orderedBit
	}
	if blk.Seek < 0 || blk.Raw < 0 || blk.RawEnd < blk.Raw || blk.First > blk.Last {
		return Block{}, 0, fmt.Errorf("block %d: offsets or times out of order: %w", len(before), ErrDamaged)
	}
	if k := len(before); k > 0 && blk.Raw < before[k-1].RawEnd {
		return Block{}, 0, fmt.Errorf("block %d overlaps the one before: %w", k, ErrDamaged)
	}
	return blk, w, nil
}

// decodeEnd decodes the end record's payload pl into ix.
func (ix *Index) decodeEnd(pl []byte) error {
	le := binary.LittleEndian
	if len(pl) != endSize {
		return fmt.Errorf("end record of %d bytes: %w", len(pl), ErrDamaged)
	}
	ix.Final = true
	ix.DataSize, ix.RawSize = int64(le.Uint64(pl[0:])), int64(le.Uint64(pl[8:]))
	ix.Ifaces = int(le.Uint32(pl[20:]))
	if int(le.Uint32(pl[16:])) != len(ix.All) {
		return fmt.Errorf("end record counts %d blocks, %d read: %w", le.Uint32(pl[16:]), len(ix.All), ErrDamaged)
	}
	return nil
}

// headerName returns the data file name of the index header at the
// start of b, if b starts with a header whose checksum verifies.
func headerName(b []byte) (string, bool) {
	le := binary.LittleEndian
	if len(b) < headerFixed+4 || [4]byte(b[:4]) != magic {
		return "", false
	}
	nl := int(le.Uint16(b[12:]))
	h := headerFixed + nl
	if nl > MaxNameLen || len(b) < h+4 || le.Uint32(b[h:]) != crc32.Checksum(b[:h], castagnoli) {
		return "", false
	}
	return string(b[headerFixed:h]), true
}

// HeadEnd returns where the data file's head (section header and the
// interfaces of HeadIfaces) ends in the decoded stream, which starts
// at data file offset 0: a reader that starts at a Span reads the
// decoded bytes [0, HeadEnd) first, for the interfaces.
func (ix *Index) HeadEnd() int64 {
	if len(ix.All) > 0 {
		return ix.All[0].Raw
	}
	return ix.RawSize
}

// Tail returns where the data file goes on after its last block: for a
// file being written, the packets committed since (up to its last
// complete batch), which a reader scans without the index. The span
// starts at Raw (the last block's end: the head when there is none) and
// has no end (RawEnd -1); N is 0. Of a gzip file it starts decoding at
// the last block's member, of a zstd file of a frame per block at the
// last block's frame, of a zstd file of one frame at 0.
func (ix *Index) Tail() Span {
	s := Span{Block: len(ix.All), RawEnd: -1}
	if n := len(ix.All); n > 0 {
		last := ix.All[n-1]
		s.Raw = last.RawEnd
		switch ix.Codec {
		case CodecNone:
			s.Seek, s.SeekRaw = last.RawEnd, last.RawEnd
		case CodecGzip, CodecZstdFrames:
			s.Seek, s.SeekRaw = last.Seek, last.Raw
		}
	}
	return s
}

// Span is a run of consecutive blocks to read: start decoding the data
// file at offset Seek, whose decoded stream starts at offset SeekRaw
// (for plain, gzip and zstd files of a frame per block SeekRaw == Raw;
// a zstd file of one frame is decoded from its start: Seek and SeekRaw
// are 0), discard the decoded
// bytes before Raw and read pcapng blocks up to RawEnd.
type Span struct {
	Seek, SeekRaw int64
	Raw, RawEnd   int64
	First, Last   int64 // earliest and latest packet time of its blocks
	Block, N      int   // its blocks: All[Block : Block+N]
}

// Blocks returns the spans of the blocks that may hold packets at
// times in [since, until) (Unix ns; use math.MinInt64 and math.MaxInt64
// for no bound): Select without a Match.
func (ix *Index) Blocks(since, until int64) []Span { return ix.Select(since, until, nil) }

// Select returns, in file order, the spans of the blocks that may hold
// packets at times in [since, until) matching m (nil: every packet),
// merged where blocks follow each other. Blocks that describe
// interfaces which a selected block's packets may use are included
// too (they come after the head). A block's packets are only candidates:
// the reader checks every packet's time and filter itself. What m
// cannot express (a filter on anything but addresses, ports and IP
// protocols, or a negation) must be left out of it: the time
// checkpoints alone then select the blocks.
func (ix *Index) Select(since, until int64, m *Match) []Span {
	if ix.Summary {
		m = nil
	}
	keep := make([]bool, len(ix.All))
	any := false
	for i := range ix.All {
		b := &ix.All[i]
		keep[i] = b.Packets > 0 && b.Last >= since && b.First < until && m.may(b)
		any = any || keep[i]
	}
	if !any {
		return nil
	}
	// A block describing interfaces is read before any kept block after it.
	last := -1
	for i := range keep {
		if keep[i] {
			last = i
		}
	}
	prev := ix.HeadIfaces
	for i := 0; i < last; i++ {
		if ix.All[i].Ifaces > prev {
			keep[i] = true
		}
		prev = ix.All[i].Ifaces
	}
	var spans []Span
	for i := 0; i < len(keep); i++ {
		if !keep[i] {
			continue
		}
		b := &ix.All[i]
		if n := len(spans); n > 0 && spans[n-1].Block+spans[n-1].N == i {
			s := &spans[n-1]
			s.N++
			s.RawEnd = b.RawEnd
			s.First, s.Last = minTime(s.First, b), maxTime(s.Last, b)
			continue
		}
		s := Span{Seek: b.Seek, SeekRaw: b.Raw, Raw: b.Raw, RawEnd: b.RawEnd, First: math.MaxInt64, Last: math.MinInt64, Block: i, N: 1}
		if !ix.Codec.Seekable() {
			s.Seek, s.SeekRaw = 0, 0
		}
		s.First, s.Last = minTime(s.First, b), maxTime(s.Last, b)
		spans = append(spans, s)
	}
	return spans
}

func minTime(t int64, b *Block) int64 {
	if b.Packets == 0 {
		return t
	}
	return min(t, b.First)
}

func maxTime(t int64, b *Block) int64 {
	if b.Packets == 0 {
		return t
	}
	return max(t, b.Last)
}

// Match is what Select asks of a block's keys: an address, a port, an
// IP protocol, or an and/or of Matches. A nil *Match matches every
// block. Build it with Host, Port, Proto, And and Or.
type Match struct {
	op   matchOp
	key  uint64
	subs []*Match
}

type matchOp uint8

const (
	opKey matchOp = iota
	opAnd
	opOr
)

func keyMatch(k uint64) *Match {
	if k == 0 {
		k = 1 // as keySet stores it
	}
	return &Match{op: opKey, key: k}
}

// Host matches blocks that may hold packets from or to address a (an
// IPv4-mapped IPv6 address matches as the IPv4 address).
func Host(a netip.Addr) *Match { return keyMatch(addrKey(a)) }

// Port matches blocks that may hold TCP, UDP or SCTP packets from or
// to port p.
func Port(p uint16) *Match { return keyMatch(portKey(p)) }

// Proto matches blocks that may hold IPv4 or IPv6 packets of protocol
// p: ip[9], or for IPv6 ip6[6], ip6[40] after a fragment header, or the
// first header after the extension headers (version 4 on; before, only
// the last).
func Proto(p uint8) *Match { return keyMatch(protoKey(p)) }

// And matches blocks that every one of ms may match.
func And(ms ...*Match) *Match { return &Match{op: opAnd, subs: ms} }

// Or matches blocks that any of ms may match.
func Or(ms ...*Match) *Match { return &Match{op: opOr, subs: ms} }

func (m *Match) may(b *Block) bool {
	if m == nil {
		return true
	}
	switch m.op {
	case opKey:
		return bloomHas(b.filter, m.key, probes(len(b.filter), b.Keys))
	case opAnd:
		for _, s := range m.subs {
			if !s.may(b) {
				return false
			}
		}
		return true
	default:
		for _, s := range m.subs {
			if s.may(b) {
				return true
			}
		}
		return false
	}
}

// MayMatch reports whether block i may hold packets matching m.
func (ix *Index) MayMatch(i int, m *Match) bool { return ix.Summary || m.may(&ix.All[i]) }
