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
// is always a complete stream on disk, which Wireshark, tshark and
// capinfos read as it is:
//
//   - gzip: every commit (acknowledgement) ends a gzip member; a file is
//     a sequence of members, which gzip readers read as one stream. A
//     crash can leave a torn member after the last complete one; the
//     next start cuts it away (repairPart). Each member starts without
//     history, so many small commits compress worse. The collector
//     commits a connection at least every 8 MiB of decompressed
//     records, so a member holds about that much.
//   - zstd: one zstd frame per file, flushed at every commit, without
//     the optional content checksum. (Wireshark 4.0 misreads files of
//     several zstd frames, so frames are not ended per commit.) A crash
//     leaves a frame without its last block; the next start decodes what
//     is whole, cuts the file at the end of the block that ends the last
//     complete batch and ends the frame there with an empty last block
//     (repairPart), in place. A full disk cuts the open file back to the
//     last flush and ends the frame the same way.

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
// frames (zstd): endMember completes the current one, so the bytes so
// far are a complete stream. It counts the bytes written to the file.
type memberWriter struct {
	z interface {
		io.WriteCloser
		Reset(io.Writer)
	}
	zstd *zstd.Encoder // z, if the codec is zstd
	open bool          // a member was started and not ended (gzip)
	out  countingWriter
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

func newMemberWriter(fc compress.Spec) (*memberWriter, error) {
	mw := &memberWriter{}
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
	mw.open = false
}

func (mw *memberWriter) Write(p []byte) (int, error) {
	mw.open = true
	return mw.z.Write(p)
}

// commit makes everything written so far a readable stream on disk up
// to a point where the file can be cut: gzip ends the member, zstd
// flushes a block.
func (mw *memberWriter) commit() error {
	if mw.zstd != nil {
		return mw.zstd.Flush()
	}
	if !mw.open {
		return nil
	}
	err := mw.z.Close()
	mw.z.Reset(&mw.out)
	mw.open = false
	return err
}

// finish ends the stream of the file.
func (mw *memberWriter) finish() error {
	if mw.zstd != nil {
		return mw.zstd.Close()
	}
	return mw.commit()
}

// terminator is what a stream cut at a commit needs appended to be
// complete: a zstd frame's empty last block (a raw block of size 0; the
// frame carries no checksum).
func (mw *memberWriter) terminator() []byte {
	if mw != nil && mw.zstd != nil {
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
