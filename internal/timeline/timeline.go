package timeline

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Bounds of GET /api/timeline.
const (
	// MaxPoints bounds the intervals of a timeline; the default step
	// is the smallest of timelineSteps giving at most this many.
	MaxPoints = 2000
	// DefaultTimelineRange is the range of a timeline without since:
	// the day before until (default now).
	DefaultTimelineRange = 24 * time.Hour
	// maxNamed bounds the file names a timeline's coverage lists.
	maxNamed = 10
	// maxStatsTail bounds what of a file's tail (after its last
	// block: its interface statistics blocks) a timeline reads.
	maxStatsTail = 256 << 10
)

// timelineSteps are the steps a timeline picks from by default; past
// the last, a whole number of days.
var timelineSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
	50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// Series is one agent's timeline: per interval, the packets and bytes
// of its index's blocks (a block spanning several intervals spread
// over them in proportion to time) and the drops its interface
// statistics count. An interval that no file of the agent spans is
// null in Packets and Bytes (nothing kept: a gap).
type Series struct {
	Agent string `json:"agent"`
	// Server is the server that keeps the agent (HOST:PORT) in a
	// federated console's timeline (Merge); empty in a server's own.
	Server  string   `json:"server,omitempty"`
	Packets []*int64 `json:"packets"`
	Bytes   []*int64 `json:"bytes"`
	Drops   []int64  `json:"drops"`
}

// TimelineCoverage is what a timeline read and what it could not.
type TimelineCoverage struct {
	Agents int `json:"agents"`
	Files  int `json:"files"`  // files whose index was read
	Blocks int `json:"blocks"` // their blocks in the range
	// Skipped: files retention's index places outside the range, not
	// opened.
	Skipped int `json:"skipped"`
	// Unindexed: files without a usable index (none, damaged, of an
	// unknown version): their packets are not counted. Named lists
	// at most maxNamed of them, with the reason.
	Unindexed int      `json:"unindexed"`
	Named     []string `json:"unindexed_files"`
	// NoDrops: files whose drops are not known: still being written
	// (the statistics are written at close) or zstd of one frame.
	NoDrops int `json:"no_drops"`
	// Summaries: of Files, those read from their timeline summary
	// (FILE.timeline, docs/index.md) rather than their index; Blocks
	// counts their blocks in the range all the same.
	Summaries int    `json:"summaries"`
	IndexRead int64  `json:"index_bytes"` // index and statistics bytes read
	Error     string `json:"error,omitempty"`
}

// Timeline is the answer of GET /api/timeline.
type Timeline struct {
	Since    time.Time        `json:"since"`
	Until    time.Time        `json:"until"`
	Step     string           `json:"step"`
	StepNs   int64            `json:"step_ns"`
	Points   int              `json:"points"`
	Agents   []Series         `json:"agents"`
	Coverage TimelineCoverage `json:"coverage"`
}

// DefaultStep is the smallest of timelineSteps (or whole days) that
// cuts span into at most MaxPoints intervals.
func DefaultStep(span time.Duration) time.Duration {
	for _, s := range timelineSteps {
		if span/s < MaxPoints || span/s == MaxPoints && span%s == 0 {
			return s
		}
	}
	day := 24 * time.Hour
	days := (span/MaxPoints + day - 1) / day
	return max(days, 1) * day
}

// BuildTimeline is the timeline of the agents of dir matching pats
// (path.Match globs; none: every agent) over [since, until) in
// intervals of step, from the files' indexes and statistics only. An
// error (the root unreadable, ctx done) comes with what was built.
func BuildTimeline(ctx context.Context, dir string, pats []string, since, until time.Time, step time.Duration) (Timeline, error) {
	n := int((until.Sub(since) + step - 1) / step)
	t := Timeline{Since: since.UTC(), Until: until.UTC(), Step: step.String(), StepNs: int64(step), Points: n,
		Agents: []Series{}}
	t.Coverage.Named = []string{}
	names, err := layout.Agents(dir)
	if err != nil {
		return t, err
	}
	var picked []string
	for _, a := range names {
		if len(pats) == 0 || slices.ContainsFunc(pats, func(p string) bool { ok, _ := path.Match(p, a); return ok }) {
			picked = append(picked, a)
		}
	}
	b := binner{ctx: ctx, since: since.UnixNano(), until: until.UnixNano(), step: int64(step), n: n}
	return t, b.all(dir, picked, &t)
}

// OpenIndex reads a data file's index for a timeline: its blocks'
// times and counts, checksums and all verified, without their filters
// and without reading the data file (index.OpenSummary). Only tests
// and benchmarks set it (to index.Open, the whole index with its
// blocks probed in the data file, to compare).
var OpenIndex = index.OpenSummary

// OpenBins reads a closed data file's timeline summary (index.OpenBins:
// FILE.timeline, its index's blocks pre-spread over bins of
// index.BinWidth), used in place of the index where the timeline's
// range and step are whole bins. Only tests and benchmarks set it (to
// nil: always the index, to compare).
var OpenBins = index.OpenBins

// binner spreads one agent's blocks and drops over the intervals.
type binner struct {
	ctx                context.Context
	since, until, step int64
	n                  int
	cov                *TimelineCoverage
}

// agent is the series of agent a: every file of it that may hold
// packets in the range, by its index.
func (b *binner) agent(dir, a string) (Series, error) {
	s := Series{Agent: a, Packets: make([]*int64, b.n), Bytes: make([]*int64, b.n), Drops: make([]int64, b.n)}
	pk, by := make([]int64, b.n), make([]int64, b.n)
	kept := make([]bool, b.n)
	files, err := layout.AgentFiles(dir, a)
	if err != nil {
		return s, err
	}
	prev := map[uint32]uint64{} // interface -> its kernel drops at the last file's close
	var prevAgent uint64
	before := -1 // the last file skipped before the range: its counters seed prev
	for fi, f := range files {
		if err := b.ctx.Err(); err != nil {
			return s, err
		}
		if f.Times && (f.Last < b.since || f.First >= b.until) {
			if f.Last < b.since {
				before = fi
			}
			b.cov.Skipped++
			continue
		}
		sum, ix, err := b.open(f)
		if err != nil {
			b.unindexed(f.Path, err)
			continue
		}
		if before >= 0 {
			if bsum, bix, err := b.open(files[before]); err == nil {
				b.cov.IndexRead += b.read(files[before], bsum, bix)
				b.drops(files[before], bix, nil, prev, &prevAgent)
			}
			before = -1
		}
		b.cov.Files++
		b.cov.IndexRead += b.read(f, sum, ix)
		if sum != nil {
			b.cov.Summaries++
			b.bins(sum, pk, by, kept)
		} else {
			b.blocks(ix, pk, by, kept)
		}
		b.drops(f, ix, s.Drops, prev, &prevAgent)
	}
	for i := range kept {
		if kept[i] {
			s.Packets[i], s.Bytes[i] = &pk[i], &by[i]
		}
	}
	return s, nil
}

// indexSize is the size of the index of the data file at p.
func indexSize(p string) int64 {
	st, err := os.Lstat(index.Path(p))
	if err != nil {
		return 0
	}
	return st.Size()
}

func (b *binner) unindexed(p string, err error) {
	b.cov.Unindexed++
	if len(b.cov.Named) < maxNamed {
		b.cov.Named = append(b.cov.Named, filepath.Base(p)+": "+err.Error())
	}
}

// blocks adds ix's blocks: a block's packets and bytes (its decoded
// pcapng bytes, RawEnd-Raw) over [First, Last] spread in proportion
// to time over the intervals it overlaps, the part outside the range
// dropped; the intervals from the file's first to its last packet are
// kept (zero, not a gap, where no packet fell).
func (b *binner) blocks(ix *index.Index, pk, by []int64, kept []bool) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i := range ix.All {
		bl := &ix.All[i]
		if bl.Packets == 0 {
			continue
		}
		lo, hi = min(lo, bl.First), max(hi, bl.Last)
		if bl.Last < b.since || bl.First >= b.until {
			continue
		}
		b.cov.Blocks++
		b.spread(bl.First, bl.Last+1, int64(bl.Packets), pk)
		b.spread(bl.First, bl.Last+1, bl.RawEnd-bl.Raw, by)
	}
	if lo > hi || hi < b.since {
		return
	}
	for i := max(b.bin(lo), 0); i < b.n && b.since+int64(i)*b.step <= hi; i++ {
		kept[i] = true
	}
}

// bin is the interval of time ts: below 0 before the range, n or over
// after it.
func (b *binner) bin(ts int64) int {
	if ts < b.since {
		return -1
	}
	return int(min((ts-b.since)/b.step, int64(b.n)))
}

// spread adds v, spread uniformly over [from, to), to the intervals it
// overlaps, each its share by the cumulative amount at the interval's
// end (rounded down), so the shares within the range sum to what of v
// falls in it, and a block within one interval adds v whole.
func (b *binner) spread(from, to, v int64, dst []int64) {
	at := func(ts int64) int64 { return index.Share(from, to, v, ts) } // the part of v before ts
	first := max(b.bin(max(from, b.since)), 0)
	for i := first; i < b.n; i++ {
		start := b.since + int64(i)*b.step
		if start >= to {
			break
		}
		end := min(start+b.step, b.until)
		dst[i] += at(end) - at(start)
	}
}

// drops adds the drops a closed file's interface statistics
// count (the writer's, at its close: kernel drops per interface and
// the agent's queue drops, counters since the agent started) less
// those of the file before, at the statistics' time.
func (b *binner) drops(f layout.FileInfo, ix *index.Index, dst []int64, prev map[uint32]uint64, prevAgent *uint64) {
	c := index.CodecOf(f.Path) // the index says whether a zstd file is of a frame per block
	if c == index.CodecZstd && ix.Codec == index.CodecZstdFrames {
		c = ix.Codec
	}
	if f.Part || !ix.Final || !(c == index.CodecNone || c.Framed()) {
		if dst != nil {
			b.cov.NoDrops++
		}
		return
	}
	tail, err := statsTail(f.Path, ix, c)
	if err != nil {
		if dst != nil {
			b.cov.NoDrops++
		}
		return
	}
	b.cov.IndexRead += int64(len(tail))
	for _, st := range parseISBs(tail) {
		d := delta(st.osdrop, prev[st.iface])
		prev[st.iface] = st.osdrop
		if st.hasAgent {
			d += delta(st.agent, *prevAgent)
			*prevAgent = st.agent
		}
		if i := b.bin(st.ts); dst != nil && i >= 0 && i < b.n {
			dst[i] += int64(min(d, math.MaxInt64))
		}
	}
}

// delta is how much a counter grew from was to now; a counter that
// fell (the agent restarted) counts from zero.
func delta(now, was uint64) uint64 {
	if now < was {
		return now
	}
	return now - was
}

// maxStatsBlock bounds the last block a compressed file's statistics
// are decoded after.
const maxStatsBlock = 64 << 20

// statsTail returns what of a closed file follows its last block in
// the decoded stream (its interface statistics), at most maxStatsTail
// bytes: of a plain file read at its offset; of a file of gzip members
// or zstd frames decoded from its last block's member or frame.
func statsTail(p string, ix *index.Index, c index.Codec) ([]byte, error) {
	var seek, raw, end int64
	if n := len(ix.All); n > 0 {
		last := &ix.All[n-1]
		seek, raw, end = last.Seek, last.Raw, last.RawEnd
	}
	if ix.RawSize <= end || end-raw > maxStatsBlock || seek > ix.DataSize {
		return nil, nil
	}
	f, err := safefs.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var r io.Reader = io.NewSectionReader(f, seek, ix.DataSize-seek)
	switch c {
	case index.CodecNone:
		r = io.NewSectionReader(f, end, ix.DataSize-end)
		raw = end
	case index.CodecGzip:
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	default: // zstd, a frame per block
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxStatsBlock+maxStatsTail))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	}
	if _, err := io.CopyN(io.Discard, r, end-raw); err != nil {
		return nil, err
	}
	return io.ReadAll(io.LimitReader(r, min(ix.RawSize-end, maxStatsTail)))
}

// isb is what a timeline takes of an Interface Statistics Block.
type isb struct {
	iface    uint32
	ts       int64 // Unix ns (the writer's interfaces are if_tsresol 9)
	osdrop   uint64
	agent    uint64 // the agent's queue drops, from the writer's comment
	hasAgent bool
}

// agentDropsText precedes the agent's queue drops in the comment the
// writer gives its statistics (store: counters since agent start).
const agentDropsText = "agent queue drops (all interfaces): "

// parseISBs reads the Interface Statistics Blocks (little-endian, as
// the writer writes them) of b, stopping at anything else or anything
// malformed: a file's tail is as hostile as the rest of it.
func parseISBs(b []byte) []isb {
	var out []isb
	for len(b) >= 28 {
		typ, total := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
		if typ != 5 || total < 28 || total%4 != 0 || int64(total) > int64(len(b)) {
			break
		}
		blk := b[:total]
		s := isb{iface: binary.LittleEndian.Uint32(blk[8:]),
			ts: int64(uint64(binary.LittleEndian.Uint32(blk[12:]))<<32 | uint64(binary.LittleEndian.Uint32(blk[16:])))}
		for o := blk[20 : total-4]; len(o) >= 4; {
			code, l := binary.LittleEndian.Uint16(o), int(binary.LittleEndian.Uint16(o[2:]))
			if code == 0 || 4+l > len(o) {
				break
			}
			val := o[4 : 4+l]
			switch {
			case code == 7 && l == 8:
				s.osdrop = binary.LittleEndian.Uint64(val)
			case code == 1:
				if _, rest, ok := strings.Cut(string(val), agentDropsText); ok {
					num, _, _ := strings.Cut(rest, ";")
					if n, err := strconv.ParseUint(num, 10, 64); err == nil {
						s.agent, s.hasAgent = n, true
					}
				}
			}
			o = o[min(len(o), 4+(l+3)&^3):]
		}
		out = append(out, s)
		b = b[total:]
	}
	return out
}
