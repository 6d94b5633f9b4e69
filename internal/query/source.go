package query

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// fileSource yields the packets of one data file (plain, gzip or zstd)
// in file order: with its index, those of the blocks the query's time
// range and filter may need (the file's head first, then the selected
// blocks, then a .part's tail or a closed file's statistics blocks);
// without one, all of them. A .part is read up to its last complete
// batch.
type fileSource struct {
	sp      *splice
	ah      *ahead // reads sp ahead, if not nil: r reads it
	r       *pcapfile.Reader
	indexed bool // read through its index
	// past: the index says the file holds packets at or after the
	// query's until (a scan finds it out packet by packet).
	past         bool
	blocksRead   int
	blocksTotal  int
	indexBytes   int64 // of the index file, read whole, and of the data to verify it
	scanBytes    int64 // of a .part, read whole for its last complete batch
	indexProblem error // why an index present was not used
	// times: of the packets of the index's blocks (when indexed and
	// the blocks hold some; else OK false).
	times layout.TimeRange

	// ends: the selected blocks of a closed indexed file, in read order
	// (plan), and ends[:read] of them read whole; nil: floor unknown.
	ends []blockEnd
	read int
	// lastTS: the time of the packet read last, which ended at the
	// reader's offset (an ordered block's floor).
	lastTS int64

	// A followed .part (tail set) is read up to limit, which advance
	// moves as the tail finds more complete batches; r is made once
	// there is something to read.
	tail    *layout.PartTail
	limit   int64
	caught  bool // the tail had read the whole file when limit was last moved
	onStats func(int, pcapfile.InterfaceStats)
}

func (s *fileSource) next(p *pcapfile.Packet) error {
	if s.r == nil {
		if s.limit <= 0 {
			return io.EOF
		}
		r, err := pcapfile.NewReader(s.sp, s.sp.k.readerConfig(s.onStats))
		if err != nil {
			return err
		}
		s.r = r
	}
	err := s.r.ReadInto(p)
	if err == nil {
		s.lastTS = p.Timestamp
	}
	return err
}

// blockEnd is a selected block of an indexed file: start and out are
// the offsets in the spliced stream where it starts and just past it,
// first the earliest packet time of it and the selected blocks after it
// and after that of the blocks after it alone (math.MaxInt64: none has
// packets); ordered: the index says its packets are in time order.
type blockEnd struct {
	start, out   int64
	first, after int64
	ordered      bool
}

// floor is a time no packet of the file still to be read is earlier
// than (stream.floor); math.MinInt64 when the index does not say. In a
// block its index says is in time order, once a packet of it was read,
// that packet's time bounds the rest of the block: so the stream
// releases each packet of an ordered block as soon as it is read,
// holding next to nothing, instead of the block whole. The claim is
// checked as it goes: a packet earlier than one released is
// ErrOutOfOrder (stream.take), never written out of order.
func (s *fileSource) floor() int64 {
	if s.ends == nil || s.r == nil {
		return math.MinInt64
	}
	off := s.r.Offset()
	for s.read < len(s.ends) && off >= s.ends[s.read].out {
		s.read++
	}
	if s.read == len(s.ends) {
		return math.MaxInt64
	}
	e := &s.ends[s.read]
	if e.ordered && off > e.start {
		// The packet read last ended in the block: it is the block's.
		return min(s.lastTS, e.after)
	}
	return e.first
}

func (s *fileSource) interfaces() []pcapfile.Interface {
	if s.r == nil {
		return nil
	}
	return s.r.Interfaces()
}

func (s *fileSource) close() error {
	if s.tail != nil {
		s.tail.Close()
	}
	if s.ah != nil {
		s.ah.Close()
	}
	return s.sp.Close()
}

// advance moves a followed file's limit to what its tail found
// complete: grew, there is more to read; final, the limit will not move
// again.
func (s *fileSource) advance() (grew, final bool, err error) {
	raw, caught, final, err := s.tail.Complete()
	s.caught = caught
	if raw > s.limit {
		s.limit = raw
		s.sp.grow(raw)
		if s.r != nil {
			s.r.Resume()
		}
		return true, false, nil
	}
	return false, final, err
}

// openFollowed opens the .part fi to follow it as it grows, read whole
// (not through its index, which lags behind the file) up to the end of
// its last complete batch as its tail finds it. One published since the
// listing is opened as openFile does.
func openFollowed(ctx context.Context, fi layout.FileInfo, k *kit, onStats func(int, pcapfile.InterfaceStats), sel *selection, poll time.Duration) (*fileSource, error) {
	f, err := safefs.Open(fi.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return openFile(ctx, fi, k, onStats, sel)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", fi.Path, err)
	}
	src := &fileSource{onStats: onStats}
	src.tail = layout.TailPart(ctx, f, fi.Path, poll)
	src.sp = newSplice(f, k, codecByName(fi.Path), []seg{{seekEnd: -1, rawEnd: 0}}, nil)
	src.sp.members = true
	return src, nil
}

// codecByName is the codec of a data file by its name, as the store
// names them (PartSuffix ignored).
func codecByName(path string) index.Codec {
	switch name := strings.TrimSuffix(path, layout.PartSuffix); {
	case strings.HasSuffix(name, ".gz"):
		return index.CodecGzip
	case strings.HasSuffix(name, ".zst"):
		return index.CodecZstd
	}
	return index.CodecNone
}

// bytesRead is the data file bytes read so far.
func (s *fileSource) bytesRead() int64 { return s.sp.n }

// selection is what a query asks of the files' indexes: its time range
// and what its filter needs.
type selection struct {
	since, until int64
	// match is what the indexes of version index.WideVersion on are
	// asked (they key the addresses of ARP and RARP); nil: time only.
	match   *index.Match
	noIndex bool // read every file whole
	// blocks is Config.Blocks: the runs of blocks to read of the
	// closed files named; nil, every block.
	blocks map[string][]BlockRun
}

func newSelection(since, until int64, filter string, noIndex bool, blocks map[string][]BlockRun) *selection {
	t := filterTerms(filter)
	return &selection{since: since, until: until, match: t.indexMatch(false), noIndex: noIndex, blocks: blocks}
}

// skipFile reports whether Config.Blocks leaves the data file fi out:
// a closed file it does not name.
func (sel *selection) skipFile(fi layout.FileInfo) bool {
	if sel.blocks == nil || fi.Part {
		return false
	}
	_, ok := sel.blocks[filepath.Base(fi.Path)]
	return !ok
}

// inRuns reports whether block i of the closed data file of ix is one
// Config.Blocks lists (or Blocks lists no runs for it).
func (sel *selection) inRuns(ix *index.Index, i int) bool {
	if sel.blocks == nil || !ix.Final {
		return true
	}
	runs := sel.blocks[ix.Name]
	if runs == nil {
		return true
	}
	return slices.ContainsFunc(runs, func(r BlockRun) bool { return uint32(i) >= r.First && uint32(i) <= r.Last })
}

// openFile opens fi for reading. A .part is first scanned for the end
// of its last complete batch (layout.CompleteLength) and read up to
// there; one published (renamed) since the listing is read whole under
// its new name. A file gone otherwise is ErrFileGone. onStats receives
// the file's statistics blocks. It returns nil for a .part without a
// complete batch. With sel, the file's index, if Open accepts it, says
// what to read of it. k is what it is read with, until it is closed.
func openFile(ctx context.Context, fi layout.FileInfo, k *kit, onStats func(int, pcapfile.InterfaceStats), sel *selection) (*fileSource, error) {
	path, limit := fi.Path, int64(-1)
	src := &fileSource{}
	if fi.Part {
		if st, err := os.Lstat(path); err == nil {
			src.scanBytes = st.Size() // CompleteLength reads it whole
		}
		n, err := layout.CompleteLength(ctx, path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			path = strings.TrimSuffix(path, layout.PartSuffix) // published meanwhile
		case err != nil:
			return nil, err
		case n == 0:
			return nil, nil
		default:
			limit = n
		}
	}
	var ix *index.Index
	if sel != nil && !sel.noIndex {
		var err error
		ix, err = index.Open(path)
		if st, serr := os.Lstat(index.Path(path)); serr == nil && st.Mode().IsRegular() {
			src.indexBytes = st.Size() // read whole by Open
		}
		if err != nil {
			ix = nil
			if !errors.Is(err, fs.ErrNotExist) {
				src.indexProblem = err
			}
		} else {
			src.indexBytes += ix.Probed // the data read to verify it
		}
	}
	f, err := safefs.Open(path)
	if errors.Is(err, fs.ErrNotExist) && path == fi.Path && fi.Part {
		// Published between the scan and here: the same bytes, and more.
		path = strings.TrimSuffix(path, layout.PartSuffix)
		f, err = safefs.Open(path)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", path, ErrFileGone)
	}
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	var codec index.Codec
	if ix != nil {
		src.indexed = true
		src.blocksTotal = len(ix.All)
		blockTimes(ix, &src.times)
		codec = ix.Codec
		src.sp = newSplice(f, k, codec, []seg{headSeg(ix, limit)}, func(head []byte) []seg {
			return sel.plan(ix, head, limit, f, src)
		})
	} else {
		codec = sniff(f)
		src.sp = newSplice(f, k, codec, []seg{{seekEnd: -1, rawEnd: limit}}, nil)
	}
	var rd io.Reader = src.sp
	if k.ahead != nil && (codec != index.CodecNone || !k.plainDirect) {
		src.ah = newAhead(src.sp, k.ahead)
		rd = src.ah
	}
	r, err := pcapfile.NewReader(rd, k.readerConfig(onStats))
	if err != nil {
		src.close()
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	src.r = r
	return src, nil
}

// headSeg is the head of an indexed file: its section header and
// first interfaces.
func headSeg(ix *index.Index, limit int64) seg {
	g := seg{seekEnd: -1, rawEnd: ix.HeadEnd()}
	if limit >= 0 {
		g.rawEnd = min(g.rawEnd, limit)
	}
	switch ix.Codec {
	case index.CodecNone:
		g.seekEnd = g.rawEnd
	case index.CodecGzip, index.CodecZstdFrames:
		if len(ix.All) > 0 && ix.All[0].Seek > 0 {
			g.seekEnd = ix.All[0].Seek
		}
	}
	return g
}

// indexedLink are the link types whose packets the index keys (see
// internal/index's keys.go).
var indexedLink = map[uint16]bool{0: true, 1: true, 12: true, 101: true, 108: true, 113: true, 228: true, 229: true, 276: true}

// plan returns the segments of the file of ix to read after its head
// (whose bytes are head; nil if too long): the blocks that may hold
// packets in the range that match the filter, the blocks describing
// interfaces that those packets (or the statistics read) may use, then
// for a file being written the tail up to limit, for a closed file
// without packets at or after until the statistics after its last
// block. It records what it selects in src.
func (sel *selection) plan(ix *index.Index, head []byte, limit int64, f *os.File, src *fileSource) []seg {
	m := sel.fileMatch(ix, head)
	all := ix.All
	keep := make([]bool, len(all))
	added := len(all) // the first block describing an interface beyond the head
	prev := ix.HeadIfaces
	for i := range all {
		if all[i].Ifaces > prev && added == len(all) {
			added = i
		}
		prev = all[i].Ifaces
		b := &all[i]
		if b.Packets > 0 && b.Last >= sel.until {
			src.past = true
		}
		// The link types of interfaces described after the head are
		// not known here: their blocks are selected by time only.
		keep[i] = b.Packets > 0 && b.Last >= sel.since && b.First < sel.until && (i >= added || ix.MayMatch(i, m)) && sel.inRuns(ix, i)
	}
	lastRaw := ix.HeadEnd()
	if n := len(all); n > 0 {
		lastRaw = all[n-1].RawEnd
	}
	tail := !ix.Final && (limit < 0 || lastRaw < limit)
	trailer := ix.Final && !src.past && ix.RawSize > lastRaw
	end := -1
	for i := range keep {
		if keep[i] {
			end = i
		}
	}
	if tail || trailer {
		end = len(all)
	}
	prev = ix.HeadIfaces
	for i := 0; i < end; i++ {
		if all[i].Ifaces > prev {
			keep[i] = true
		}
		prev = all[i].Ifaces
	}
	var segs []seg
	for i := 0; i < len(all); {
		if !keep[i] {
			i++
			continue
		}
		j := i
		for j < len(all) && keep[j] {
			j++
		}
		src.blocksRead += j - i
		g := seg{seek: all[i].Seek, seekRaw: all[i].Raw, seekEnd: -1, raw: all[i].Raw, rawEnd: all[j-1].RawEnd}
		switch ix.Codec {
		case index.CodecNone:
			g.seekEnd = g.rawEnd
		case index.CodecGzip, index.CodecZstdFrames:
			if g.seek == 0 {
				g.seekRaw = 0
			}
			if j < len(all) {
				g.seekEnd = all[j].Seek
			} else if ix.Final {
				g.seekEnd = ix.DataSize
			}
		case index.CodecZstd:
			g.seek, g.seekRaw = 0, 0
		}
		if limit >= 0 {
			if g.raw >= limit {
				break
			}
			g.rawEnd = min(g.rawEnd, limit)
		}
		segs = append(segs, g)
		i = j
	}
	if ix.Final && limit < 0 && !tail {
		src.ends = blockEnds(ix, keep, segs, headSeg(ix, limit))
	}
	// What follows the last block: read on from it when it was read,
	// else start a decoder for it.
	if !tail && !trailer {
		return segs
	}
	if n := len(segs); n > 0 && segs[n-1].rawEnd == lastRaw {
		segs[n-1].rawEnd, segs[n-1].seekEnd = limit, -1
		return segs
	}
	g := seg{seek: lastRaw, seekRaw: lastRaw, seekEnd: -1, raw: lastRaw, rawEnd: limit}
	switch {
	case ix.Codec == index.CodecZstd:
		g.seek, g.seekRaw = 0, 0
	case ix.Codec.Framed() && len(all) == 0:
		g.seek, g.seekRaw = 0, 0
	case ix.Codec == index.CodecZstdFrames:
		last := all[len(all)-1]
		g.seek, g.seekRaw = last.Seek, last.Raw
		if last.Seek == 0 {
			g.seekRaw = 0
		}
		if trailer {
			seek, n, ok := zstdTrailer(f, ix.DataSize, ix.RawSize, lastRaw, last.Seek)
			if ok {
				g.seek, g.seekRaw = seek, lastRaw
			}
			src.sp.n += n
		}
	case ix.Codec == index.CodecGzip:
		last := all[len(all)-1]
		g.seek, g.seekRaw = last.Seek, last.Raw
		if last.Seek == 0 {
			g.seekRaw = 0
		}
		if trailer {
			if seek, raw, n, ok := gzipTrailer(f, ix.DataSize, ix.RawSize, lastRaw, last.Seek); ok {
				g.seek, g.seekRaw = seek, raw
				src.sp.n += n
			}
		}
	}
	return append(segs, g)
}

// blockEnds is fileSource.ends for the blocks keep selects of ix, read
// as segs after head: each block's end in the spliced stream, and the
// earliest packet time of it and the selected blocks after it.
func blockEnds(ix *index.Index, keep []bool, segs []seg, head seg) []blockEnd {
	ends := make([]blockEnd, 0, len(segs))
	out := head.rawEnd - head.raw
	g := 0
	for i := range ix.All {
		if !keep[i] {
			continue
		}
		b := &ix.All[i]
		for g < len(segs) && b.RawEnd > segs[g].rawEnd {
			out += segs[g].rawEnd - segs[g].raw
			g++
		}
		if g == len(segs) || b.Raw < segs[g].raw {
			return nil // not as plan laid the segments out
		}
		e := blockEnd{start: out + b.Raw - segs[g].raw, out: out + b.RawEnd - segs[g].raw,
			first: math.MaxInt64, after: math.MaxInt64, ordered: b.Ordered}
		if b.Packets > 0 {
			e.first = b.First
		}
		ends = append(ends, e)
	}
	for i := len(ends) - 2; i >= 0; i-- {
		ends[i].after = ends[i+1].first
		ends[i].first = min(ends[i].first, ends[i].after)
	}
	return ends
}

// fileMatch is what the file of ix may be asked, given its head: nil
// (time only) when the index is of a version before
// index.WideVersion, or the head does not parse or describes an
// interface whose link type the index does not key.
func (sel *selection) fileMatch(ix *index.Index, head []byte) *index.Match {
	if !ix.KeysWide() {
		return nil // its filters may miss packets libpcap matches
	}
	lts, ok := headLinkTypes(head)
	if !ok || len(lts) != ix.HeadIfaces {
		return nil
	}
	for _, lt := range lts {
		if !indexedLink[lt] {
			return nil
		}
	}
	return sel.match
}
