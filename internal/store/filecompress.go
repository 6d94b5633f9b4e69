package store

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sync/atomic"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/pcapflate"
	"github.com/pcapsync/pcapsync/internal/pcapzstd"
)

// streamCoder is an encoder of a file's members or frames: Close ends
// one, Reset starts the next. gzip's: the library's, or pcapflate's for
// flat members.
type streamCoder interface {
	io.WriteCloser
	Reset(io.Writer)
}

// zstdCoder is what memberWriter needs of a zstd encoder: the
// library's, or pcapzstd's for flat streams.
type zstdCoder interface {
	streamCoder
	Flush() error
}

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
//     content checksum. The head is held with the first packets until
//     the first commit (memberWriter chooses the file's compression from
//     them), so until then the file is empty. Every zstd reader reads it whole, Wireshark
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

// rejudgeBytes is how much a zstd frame on the library's encoder takes
// before the next commit judges it again: what it costs (up to
// probeBytes held, copied once more and counted) stays under 2% of the
// bytes however often the connection commits.
const rejudgeBytes = 4 << 20

// probeBytes is how much of a stream (a zstd file or frame, a gzip
// member) memberWriter holds before it chooses how to compress it,
// unless a commit comes first: the sample probeFlat judges.
const probeBytes = 64 << 10

// minProbe is the smallest sample probeFlat judges; a smaller one
// (a head, a tiny first batch) is compressed as configured.
const minProbe = 4 << 10

// probeFlat reports whether a sample (its parts, in order) looks
// incompressible by entropy coding: its bytes are close to evenly
// spread (at least pcapzstd.FlatBits of Shannon entropy a byte, the
// threshold pcapzstd judges its blocks by). Cheap: one pass of counting.
func probeFlat(parts ...[]byte) bool {
	var hist [256]uint32
	size := 0
	for _, p := range parts {
		for _, b := range p {
			hist[b]++
		}
		size += len(p)
	}
	if size < minProbe {
		return false
	}
	n := float64(size)
	var h float64
	for _, c := range hist {
		if c != 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h >= pcapzstd.FlatBits
}

// memberWriter compresses a file as a sequence of members (gzip) or
// frames (zstd): commit(true) completes the current one, so the bytes
// so far are a complete stream. It counts the bytes written to the
// file.
//
// It chooses how to compress each stream (a zstd file, or frame with a
// frame per block; a gzip member) from its first bytes (probeFlat, on
// up to probeBytes held back until then or the stream's first commit):
// a stream whose bytes look incompressible by entropy coding (random or
// encrypted payloads) is compressed the cheap way, which there changes
// its size by 2-3%: zstd with pcapzstd's encoder whatever the level
// (matches sought only in the heads of the pcapng blocks, where the
// headers repeat; literals stored raw: about half the CPU of the
// library's level 1 without Huffman coding), gzip with pcapflate's
// whatever the level (the same matcher; the payloads in stored blocks:
// about a sixth of the CPU of the library's level 1). Other streams
// are compressed as configured. A zstd frame on the library's encoder
// is judged again at a flush (a commit) once rejudgeBytes have passed
// since it was judged, on the bytes that follow: traffic that turned
// flat goes on in the same frame with pcapzstd's encoder
// (pcapzstd.Encoder.Continue), to the frame's end. Not the other way:
// the library's encoder cannot take over a frame, and pcapzstd's
// matches a block of text anywhere in its window.
//
// Both codecs compress off the caller's goroutine (aheadWriter): the
// caller's bytes are copied into chunks of 1 MiB that a goroutine of
// the file's own feeds to the encoder (zstd's on one goroutine, its
// blocks matched and coded in turn), at most two
// chunks a file held; commit waits for them and for the encoder's
// flush, so what a commit returned is on disk as before. The encoder's
// output is buffered (outBuf) and written to the file in pieces of
// that size, and at every commit.
type memberWriter struct {
	z        streamCoder
	zstd     zstdCoder         // z, if the codec is zstd: zstdConf or zstdFlat
	zstdConf *zstd.Encoder     // zstd at the configured level
	zstdFlat *pcapzstd.Encoder // zstd for flat streams; made for the first
	ahead    *aheadWriter      // compresses into z off the caller's goroutine
	frames   bool              // zstd: commit(true) ends the frame (ZstdFramePerBlock)
	open     bool              // a member or frame was started and not ended (gzip; zstd with frames)
	frameEnd int64             // written() where the last zstd frame ended (frames)
	out      countingWriter    // counts what the encoder wrote, into file
	file     *bufio.Writer     // buffers the encoder's output for the file

	// The choice per stream (see above).
	held    []byte             // the stream's first bytes, not yet compressed
	holding bool               // the stream is not started: Write appends to held
	gzFlat  *pcapflate.Encoder // gzip for flat members; made for the first
	gzConf  *gzip.Writer       // gzip at the configured level
	flat    bool               // the current stream is compressed as flat
	rejudge bool               // what is held goes on a zstd frame begun with the library's encoder
	since   int64              // bytes written since the stream was last judged
}

// countingWriter counts what reaches the file. With zstd the count
// moves on the encoder's goroutine: n is atomic, read with memberWriter.written.
type countingWriter struct {
	w io.Writer
	n atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
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
		mw.z, mw.gzConf = z, z
	case compress.Zstd:
		z, err := newZstdFileEncoder(zstdLevel(fc))
		if err != nil {
			return nil, err
		}
		mw.z, mw.zstd, mw.zstdConf = z, z, z
	default:
		return nil, fmt.Errorf("file compression %v", fc)
	}
	mw.ahead = newAheadWriter(mw.z)
	mw.file = bufio.NewWriterSize(nil, outBuf)
	mw.out.w = mw.file
	return mw, nil
}

// zstdLevel is the encoder's level for fc: zstd's own 1-22 mapped to
// the library's four, and DefaultZstdLevel for none.
func zstdLevel(fc compress.Spec) zstd.EncoderLevel {
	if fc.Level == 0 {
		return zstd.EncoderLevelFromZstd(DefaultZstdLevel)
	}
	return zstd.EncoderLevelFromZstd(fc.Level)
}

// DefaultZstdLevel is the level of zstd files without one
// (--file-compress zstd): 1, the encoder's fastest, which keeps up with
// the collector and compresses text as well as its default level (3)
// does with the 1 MiB window of files (BENCHMARKS.md "Issue 30: zstd
// files").
const DefaultZstdLevel = 1

// reset starts writing a new file to w, once the blocks of the last
// one in flight are written (or dropped, their file abandoned).
func (mw *memberWriter) reset(w io.Writer) {
	mw.ahead.Reset(mw.z) // waits for the chunks in flight
	mw.z.Reset(&mw.out)
	mw.file.Reset(w) // what it held is dropped with the file
	mw.out.n.Store(0)
	mw.open, mw.frameEnd = false, 0
	mw.hold()
}

// hold starts a stream: its first bytes are held until chosen.
func (mw *memberWriter) hold() {
	mw.held, mw.holding, mw.rejudge = mw.held[:0], true, false
}

// written is the number of bytes written to the file (after a commit;
// between commits, some may still be buffered).
func (mw *memberWriter) written() int64 { return mw.out.n.Load() }

// reaches reports whether the file has reached size bytes, counting
// what its compressor still holds at the file's compression ratio so
// far; when that count says it may have, it waits for the compressor,
// so that the answer is what reached the encoder's output, as it was
// before the compressor had a goroutine (rotation by size stays within
// about what one write adds, not two chunks of 1 MiB).
func (mw *memberWriter) reaches(size int64) bool {
	w := mw.written()
	held, fed := mw.ahead.pending()
	if held == 0 {
		return w >= size
	}
	est := held // nothing compressed yet: as if incompressible
	if fed > 0 {
		est = held*w/fed + 1
	}
	if w+est < size {
		return false
	}
	mw.ahead.Wait() // an error comes back with the next write or commit
	return mw.written() >= size
}

// outBuf is the size of memberWriter's buffer of compressed bytes: the
// zstd encoder writes every block (64 KiB of input) at once, and ext4's
// cost per write(2) made those writes a tenth of the collector's CPU.
const outBuf = 256 << 10

// setFile makes the file's descriptor (or parkedWriter) w the
// destination of what follows; nothing may be buffered (after a commit).
func (mw *memberWriter) setFile(w io.Writer) { mw.file.Reset(w) }

// park ends the compressor's goroutine while the file's descriptor is
// closed (after a commit: it has nothing left to write).
func (mw *memberWriter) park() {
	mw.ahead.Stop()
	mw.setFile(parkedWriter{})
}

func (mw *memberWriter) Write(p []byte) (int, error) {
	mw.open = true
	if mw.holding {
		if len(mw.held)+len(p) < probeBytes {
			mw.held = append(mw.held, p...)
			return len(p), nil
		}
		if err := mw.start(p[:probeBytes-len(mw.held)]); err != nil {
			return 0, err
		}
	}
	mw.since += int64(len(p))
	return mw.ahead.Write(p)
}

// start chooses how to compress the stream from what is held and the
// first bytes to follow it (next), and compresses what is held; with
// rejudge, whether the library's zstd frame goes on with pcapzstd's
// encoder.
func (mw *memberWriter) start(next []byte) error {
	mw.holding, mw.since = false, 0
	flat := probeFlat(mw.held, next)
	if err := mw.ahead.Wait(); err != nil {
		return err
	}
	switch {
	case mw.zstd != nil:
		var z zstdCoder = mw.zstdConf
		if flat {
			if mw.zstdFlat == nil {
				mw.zstdFlat = pcapzstd.NewEncoder(nil)
			}
			z = mw.zstdFlat
		}
		if z != mw.zstd {
			if mw.rejudge {
				mw.zstdFlat.Continue(&mw.out) // the library flushed its last block
			} else {
				z.Reset(&mw.out) // the stream to come is not started in either
			}
			mw.z, mw.zstd, mw.ahead.w = z, z, z
		}
	default: // gzip
		var z streamCoder = mw.gzConf
		if flat {
			if mw.gzFlat == nil {
				mw.gzFlat = pcapflate.NewEncoder(nil)
			}
			z = mw.gzFlat
		}
		if z != mw.z {
			z.Reset(&mw.out)
			mw.z, mw.ahead.w = z, z
		}
	}
	mw.flat = flat
	if len(mw.held) == 0 {
		return nil
	}
	_, err := mw.ahead.Write(mw.held)
	mw.held = mw.held[:0]
	return err
}

// commitHead commits a new file's head (section header, interfaces),
// as commit(true); but a zstd file of one frame keeps it held with its
// first packets, from which its compression is chosen: until the first
// commit after, the file is empty (a crash leaves an empty .part,
// which repair removes: it held nothing acknowledged).
func (mw *memberWriter) commitHead() error {
	if mw.zstd != nil && !mw.frames {
		return nil
	}
	return mw.commit(true)
}

// commit makes everything written so far a readable stream on disk up
// to a point where the file can be cut: gzip ends the member, zstd
// flushes a block, or, with end and a frame per block, ends the frame
// (the next Write starts another).
func (mw *memberWriter) commit(end bool) error {
	if !mw.open && mw.holding {
		return nil // a member or frame of nothing: none
	}
	if mw.holding {
		if err := mw.start(nil); err != nil {
			return err
		}
	}
	if err := mw.ahead.Wait(); err != nil {
		return err
	}
	if mw.zstd != nil && !(mw.frames && end) {
		err := mw.flushFile(mw.zstd.Flush())
		if err == nil && !mw.flat && mw.since >= rejudgeBytes {
			mw.hold()
			mw.rejudge = true
		}
		return err
	}
	err := mw.flushFile(mw.z.Close())
	mw.z.Reset(&mw.out)
	mw.open = false
	mw.hold()
	if err == nil && mw.zstd != nil {
		mw.frameEnd = mw.written()
	}
	return err
}

// flushFile writes out the buffered compressed bytes after the
// encoder's flush or close returned err.
func (mw *memberWriter) flushFile(err error) error {
	if err != nil {
		return err
	}
	return mw.file.Flush()
}

// finish ends the stream of the file, and the compressor's goroutine.
func (mw *memberWriter) finish() error {
	defer mw.ahead.Stop()
	if mw.zstd == nil || mw.frames {
		return mw.commit(true)
	}
	if mw.holding {
		if err := mw.start(nil); err != nil {
			return err
		}
	}
	if err := mw.ahead.Wait(); err != nil {
		return err
	}
	return mw.flushFile(mw.zstd.Close())
}

// terminator is what the stream cut at end, a commit's end, needs
// appended to be complete: inside a zstd frame, its empty last block (a
// raw block of size 0; the frame carries no checksum); nothing at the
// end of a gzip member or zstd frame, nor in an empty file.
func (mw *memberWriter) terminator(end int64) []byte {
	if mw != nil && mw.zstd != nil && end > 0 && !(mw.frames && end == mw.frameEnd) {
		return zstdLastBlock[:]
	}
	return nil
}

// newZstdFileEncoder: no content checksum (so that a frame cut at a
// block can be ended), a 1 MiB window (the encoder of each agent stays
// small when thousands of agents write at once: about 3 MiB with its
// history of twice the window and its block's buffers), and on the
// caller's goroutine (memberWriter's aheadWriter is the one off the
// connection): the library's own concurrency hands over every 64 KiB
// block, and on two cores those handoffs cost more CPU than they
// bought. Not the library's lower-memory mode: its history of the
// window and one block is moved back every block (1 MiB copied per
// 64 KiB compressed), which made level 1 a third slower for 1 MiB less
// a file.
func newZstdFileEncoder(lvl zstd.EncoderLevel) (*zstd.Encoder, error) {
	return zstd.NewWriter(io.Discard, zstd.WithEncoderLevel(lvl), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(false), zstd.WithWindowSize(1<<20))
}
