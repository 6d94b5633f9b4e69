package store

import (
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
)

// The files a Store writes are compressed as Config.FileCompress says
// (a compress.Spec that compress.Files allows: none, gzip[:1-9],
// zstd[:1-22]; the collector's --file-compress). What was acknowledged
// is always a complete stream on disk:
//
//   - gzip: every commit (acknowledgement) ends a gzip member; a file is
//     a sequence of members, which gzip readers read as one stream. A
//     crash can leave a torn member after the last complete one; the
//     next start cuts it away (repairPart). Each member starts without
//     history, so many small commits compress worse. The collector
//     commits a connection at least every 8 MiB of decompressed
//     records, so a member holds about that much.
//   - zstd, Config.ZstdFrames ZstdFramePerFile (the default): one zstd
//     frame per file, flushed at every commit, without the optional
//     content checksum. Every zstd reader reads it whole, Wireshark
//     4.0's own zstd reader too (it reads only the first frame of a
//     file). A query decodes such a file from its start. A crash
//     leaves a frame without its last block; the next start decodes
//     what is whole, cuts the file at the end of the block that ends
//     the last complete batch and ends the frame there with an empty
//     last block (repairPart), in place. A full disk cuts the open file
//     back to the last flush and ends the frame the same way.
//   - zstd, ZstdFramePerBlock: as above, but a frame ends after the
//     file's head (section header and interfaces), at the commit that
//     ends a block of the index (the first after IndexBlock decoded
//     bytes of the frame; DefaultIndexBlock without an index), and
//     before the statistics blocks at close; so every block of the
//     index starts a frame, which a query decodes alone, as it does a
//     gzip member. zstd, zstdcat and `zstdcat FILE | tshark -r -` read
//     every frame; Wireshark 4.0's own zstd reader misreads files of
//     several frames (here: small ones whole, larger ones cut short as
//     "damaged or corrupt"). Each frame starts without history: files
//     of very compressible packets grow (13% on IMIX with text payloads
//     at 512 KiB blocks), others hardly (BENCHMARKS.md "Issue 16: zstd
//     frames"). Repair is the same: a cut inside a frame ends it with an
//     empty last block, a cut at a frame's end needs nothing.

// fileExt is the extension after ".pcapng" of files compressed with c.
func fileExt(c compress.Codec) string {
	switch c {
	case compress.Gzip:
		return ".gz"
	case compress.Zstd:
		return ".zst"
	}
	return ""
}

// memberWriter compresses a file as a sequence of members (gzip) or
// frames (zstd): commit(true) completes the current one, so the bytes
// so far are a complete stream. It counts the bytes written to the
// file.
type memberWriter struct {
	z interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	zstd     *zstd.Encoder // z, if the codec is zstd
	frames   bool          // zstd: commit(true) ends the frame (ZstdFramePerBlock)
	open     bool          // a member or frame was started and not ended (gzip; zstd with frames)
	frameEnd int64         // out.n where the last zstd frame ended (frames)
	out      countingWriter
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func newMemberWriter(fc compress.Spec, frames ZstdFrames) (*memberWriter, error) {
	mw := &memberWriter{frames: fc.Codec == compress.Zstd && frames == ZstdFramePerBlock}
	switch fc.Codec {
	case compress.Gzip:
		lvl := gzip.DefaultCompression
		if fc.Level != 0 {
			lvl = fc.Level
		}
		z, err := gzip.NewWriterLevel(io.Discard, lvl)
		if err != nil {
			return nil, err
		}
		mw.z = z
	case compress.Zstd:
		lvl := zstd.SpeedDefault
		if fc.Level != 0 {
			lvl = zstd.EncoderLevelFromZstd(fc.Level)
		}
		// One goroutine, a 1 MiB window: the encoder of each open file
		// stays small when thousands of agents write at once.
		z, err := newZstdFileEncoder(lvl)
		if err != nil {
			return nil, err
		}
		mw.z, mw.zstd = z, z
	default:
		return nil, fmt.Errorf("file compression %v", fc)
	}
	return mw, nil
}

// reset starts writing a new file to w.
func (mw *memberWriter) reset(w io.Writer) {
	mw.out = countingWriter{w: w}
	mw.z.Reset(&mw.out)
	mw.open, mw.frameEnd = false, 0
}

func (mw *memberWriter) Write(p []byte) (int, error) {
	mw.open = true
	return mw.z.Write(p)
}

// commit makes everything written so far a readable stream on disk up
// to a point where the file can be cut: gzip ends the member, zstd
// flushes a block, or, with end and a frame per block, ends the frame
// (the next Write starts another).
func (mw *memberWriter) commit(end bool) error {
	if mw.zstd != nil && !(mw.frames && end) {
		return mw.zstd.Flush()
	}
	if !mw.open {
		return nil // a member or frame of nothing: none
	}
	err := mw.z.Close()
	mw.z.Reset(&mw.out)
	mw.open = false
	if err == nil && mw.zstd != nil {
		mw.frameEnd = mw.out.n
	}
	return err
}

// finish ends the stream of the file.
func (mw *memberWriter) finish() error {
	if mw.zstd == nil || mw.frames {
		return mw.commit(true)
	}
	return mw.zstd.Close()
}

// terminator is what the stream cut at end, a commit's end, needs
// appended to be complete: inside a zstd frame, its empty last block (a
// raw block of size 0; the frame carries no checksum); nothing at the
// end of a gzip member or zstd frame.
func (mw *memberWriter) terminator(end int64) []byte {
	if mw != nil && mw.zstd != nil && !(mw.frames && end == mw.frameEnd) {
		return zstdLastBlock[:]
	}
	return nil
}

// newZstdFileEncoder: one goroutine, no content checksum (so that a
// frame cut at a block can be ended), a 1 MiB window (the encoder of
// each open file stays small when thousands of agents write at once).
func newZstdFileEncoder(lvl zstd.EncoderLevel) (*zstd.Encoder, error) {
	return zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithWindowSize(1<<20), zstd.WithLowerEncoderMem(true))
}
