package timeline

import (
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
)

// whole reports whether the timeline's range and step are whole bins
// of a summary: its intervals are then unions of bins, and the bins
// summed give exactly what spreading the blocks gives (index.Share).
func (b *binner) whole() bool {
	w := index.BinWidth
	return OpenBins != nil && b.step%w == 0 && b.since%w == 0 && b.until%w == 0
}

// open reads what the timeline takes of file f: its timeline summary
// where one serves (whole; the file closed, the summary sound and
// matching), with an index standing for the summary's last block and
// end record (what drops reads); else its index (OpenIndex).
func (b *binner) open(f layout.FileInfo) (*index.Bins, *index.Index, error) {
	if b.whole() && !f.Part {
		if s, err := OpenBins(f.Path); err == nil {
			ix := &index.Index{Name: s.Name, Codec: s.Codec, Final: s.Final, DataSize: s.DataSize, RawSize: s.RawSize, Summary: true}
			if s.HasLast {
				ix.All = []index.Block{{Seek: s.LastSeek, Raw: s.LastRaw, RawEnd: s.LastRawEnd}}
			}
			return s, ix, nil
		}
	}
	ix, err := OpenIndex(f.Path)
	return nil, ix, err
}

// read is the bytes the timeline read of f: its summary, or its index
// and what of the data file verifying it took.
func (b *binner) read(f layout.FileInfo, s *index.Bins, ix *index.Index) int64 {
	if s != nil {
		return s.Size
	}
	return indexSize(f.Path) + ix.Probed
}

// bins adds a summary's bins to the intervals they fall in (whole:
// each bin in one interval), its blocks in the range to the coverage,
// and keeps the intervals from its first to its last packet, as blocks
// does for an index.
func (b *binner) bins(s *index.Bins, pk, by []int64, kept []bool) {
	if s.Blocks == 0 {
		return
	}
	w := s.Width
	out := int64(0) // blocks ending before the range or beginning at or after its end
	for k, c := range s.Bin {
		start := (s.Start + int64(k)) * w
		switch {
		case start < b.since:
			out += c.Lasts
			continue
		case start >= b.until:
			out += c.Firsts
			continue
		}
		i := (start - b.since) / b.step
		pk[i] += c.Packets
		by[i] += c.Bytes
	}
	b.cov.Blocks += max(s.Blocks-int(out), 0)
	if s.Last < b.since {
		return
	}
	for i := max(b.bin(s.First), 0); i < b.n && b.since+int64(i)*b.step <= s.Last; i++ {
		kept[i] = true
	}
}
