package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/safefs"
)

// Every data file gets an index beside it (package index, docs/index.md):
// written while the file is written as <final name>.idx.part, renamed
// to <final name>.idx just before the data file is (publish), removed
// with the data file by retention and counted in its bytes. The index
// is a hint that readers verify, never needed for correctness, so it
// costs the write path no sync and no error: a failure to write it
// drops it (the file's readers scan instead; `pcapsync index` rebuilds
// it), a crash leaves an .idx.part that repair removes, and a file cut
// back after a write error (abandon) loses its index.
//
// A block of the index ends at the first commit after Config.IndexBlock
// decoded bytes: where a reader can start (plain: any offset; gzip: the
// member the commit ended; zstd of a frame per block: the frame the
// commit ended (filecompress.go); zstd of one frame: a reader decodes
// from the file's start and skips to the block). Ended blocks are
// appended to the index file at the commit that ends one, at most
// every indexWriteInterval unless indexWriteBytes of them wait, and
// when the file closes; the index file is opened for each write and
// closed again, so it never holds a descriptor of the open-file budget,
// and its opens (which allocate) stay rare: a reader of the file being
// written finds its blocks up to a second late and scans the rest.

// indexWriteInterval and indexWriteBytes bound how long and how much
// of the index waits in memory (tests shorten the interval).
var indexWriteInterval = time.Second

const indexWriteBytes = 64 << 10

// ixStart begins the index of the file just opened.
func (af *agentFile) ixStart() {
	af.ixLive, af.ixWrote, af.ixBytes, af.ixLast = false, 0, 0, time.Time{}
	if af.ixBlock <= 0 {
		return
	}
	if af.ix == nil {
		af.ix = new(index.Builder)
	}
	af.ix.Reset(filepath.Base(af.path), af.ixCodec(), len(af.ifaces), int(af.ixBlock), af.ixSeek(), af.w.Written())
	af.ixLive = true
}

// ixCodec is the index's codec of the open file.
func (af *agentFile) ixCodec() index.Codec {
	switch af.comp.Codec {
	case compress.Gzip:
		return index.CodecGzip
	case compress.Zstd:
		if af.mw.frames {
			return index.CodecZstdFrames
		}
		return index.CodecZstd
	}
	return index.CodecNone
}

// ixSeek is where a decoder starts to read what is written next, right
// after a commit.
func (af *agentFile) ixSeek() int64 {
	switch {
	case af.mw == nil:
		return af.w.Written()
	case af.mw.zstd != nil && !af.mw.frames:
		return 0
	}
	return af.mw.written()
}

// ixCommit ends the index's block at a commit once it holds enough,
// and writes the blocks ended so far. With a zstd frame per block, the
// block ends where the commit ended a frame (frameEnded), and only
// there.
func (af *agentFile) ixCommit(frameEnded bool) {
	if !af.ixLive {
		return
	}
	raw := af.w.Written()
	if af.mw != nil && af.mw.frames && frameEnded || !(af.mw != nil && af.mw.frames) && raw-af.ix.BlockRaw() >= af.ixBlock {
		af.ix.EndBlock(raw, af.w.Interfaces(), af.ixSeek())
	}
	if af.ix.Blocks() > af.ixWrote {
		if now := time.Now(); now.Sub(af.ixLast) >= indexWriteInterval || len(af.ix.Pending()) >= indexWriteBytes {
			af.ixLast = now
			af.ixWrite()
		}
	}
}

// ixFinish ends the index of the file being closed, whose packets end
// at rawEnd in the decoded stream, with its end record.
func (af *agentFile) ixFinish(rawEnd int64) {
	if !af.ixLive {
		return
	}
	af.ix.Finish(rawEnd, af.w.Interfaces(), af.onDisk(), af.w.Written())
	af.ixWrite()
	af.ixLive = false
}

// ixWrite appends what the index holds unwritten to the index file.
func (af *agentFile) ixWrite() {
	p := af.ix.Pending()
	if err := appendFile(index.Path(af.path+layout.PartSuffix), p); err != nil {
		af.logErr("writing the index; the file is left without one (pcapsync index rebuilds it)", err)
		if af.counters != nil {
			af.counters.IndexErrors.Add(1)
		}
		af.ixDrop()
		af.flowDrop() // its records name the blocks of the index dropped
		return
	}
	af.ixBytes += int64(len(p))
	af.ixWrote = af.ix.Blocks()
	af.ix.Clear()
	if af.ret != nil {
		af.ret.Note(retention.Event{Kind: retention.Wrote, Bytes: int64(len(p))})
	}
}

// ixDrop gives up the index of the open file and removes what was
// written of it.
func (af *agentFile) ixDrop() {
	if !af.ixLive && af.ixBytes == 0 {
		return
	}
	af.ixLive = false
	af.ixBytes = 0
	if af.path != "" {
		os.Remove(index.Path(af.path + layout.PartSuffix))
	}
}

// publishIndex renames the index of part, a data file being published,
// to its final name: before the data file, so that a published data
// file never has an unpublished index. A failure leaves the file
// without an index.
func publishIndex(part string) {
	publishBeside(index.Path(part), index.Path(strings.TrimSuffix(part, layout.PartSuffix)))
}

// publishBins writes the timeline summary of the data file just
// published at path (index.WriteBins: its index's blocks over bins,
// read from the index, not the packets). A failure (no index: it was
// dropped; packets spanning too long) leaves it without one: a
// timeline reads its index, and pcapsync index writes the summary.
func publishBins(path string) {
	index.WriteBins(path) //nolint:errcheck // best effort, see above
}

// publishBeside renames from, a file beside a data file being
// published, to its final name to; a failure removes it.
func publishBeside(from, to string) {
	if err := os.Rename(from, to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.Remove(from)
	}
}

// appendFile appends p to the file at path (made if missing, never
// through a link), opened for this write only.
func appendFile(path string, p []byte) error {
	f, err := safefs.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err == nil {
		_, err = f.Write(p)
		err = errors.Join(err, f.Close())
	}
	return err
}

// partFiles returns the data files in dir still being written (or left
// so by a crash), not their indexes: regular files of the names the
// Store gives them (a link or FIFO so named is not repaired).
func partFiles(dir string) []string {
	parts, _ := filepath.Glob(filepath.Join(dir, "*.pcapng*"+layout.PartSuffix)) // the pattern is valid
	agent := filepath.Base(dir)
	out := parts[:0]
	for _, p := range parts {
		st, err := os.Lstat(p)
		if err == nil && st.Mode().IsRegular() && layout.IsDataFile(agent, strings.TrimSuffix(filepath.Base(p), layout.PartSuffix)) {
			out = append(out, p)
		}
	}
	return out
}
