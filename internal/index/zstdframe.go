package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// zstd frames (RFC 8878, section 3.1) are walked by their headers: a
// frame header, then blocks of a 3-byte header each (last-block flag,
// type, size: a raw or compressed block's content is size bytes, an RLE
// block's one byte), then a 4-byte checksum if the header says so.
// Skippable frames are a magic and a length. A frame's end is found
// without decoding it, reading a few bytes per block.
const (
	zstdMagic     = 0xFD2FB528
	zstdSkipMagic = 0x184D2A50 // ... through 0x184D2A5F
	zstdMaxBlock  = 128 << 10
)

// errNotZstd: the bytes at a frame's offset are not a zstd frame.
var errNotZstd = errors.New("not a zstd frame")

// ZstdFrameEnd returns the offset after the zstd frame (or skippable
// frame) that starts at offset off of r, which holds size bytes, and
// the bytes of r it read to find it: the frame header and one header
// per block. A frame that does not end within size fails with
// io.ErrUnexpectedEOF (a frame still being written, or torn by a
// crash), bytes that are not a frame with another error.
func ZstdFrameEnd(r io.ReaderAt, off, size int64) (end, read int64, err error) {
	var h [18]byte // magic, descriptor, window, dictionary id, content size
	n, err := r.ReadAt(h[:min(int64(len(h)), max(size-off, 0))], off)
	read += int64(n)
	if err != nil && err != io.EOF {
		return 0, read, err
	}
	if n < 4 {
		return 0, read, io.ErrUnexpectedEOF
	}
	le := binary.LittleEndian
	if m := le.Uint32(h[:]); m&^0xF == zstdSkipMagic {
		if n < 8 {
			return 0, read, io.ErrUnexpectedEOF
		}
		end = off + 8 + int64(le.Uint32(h[4:]))
		if end > size {
			return 0, read, io.ErrUnexpectedEOF
		}
		return end, read, nil
	} else if m != zstdMagic {
		return 0, read, fmt.Errorf("at offset %d: %w", off, errNotZstd)
	}
	if n < 5 {
		return 0, read, io.ErrUnexpectedEOF
	}
	d := h[4]
	if d&0x08 != 0 {
		return 0, read, fmt.Errorf("at offset %d: reserved bit set: %w", off, errNotZstd)
	}
	single := d&0x20 != 0
	hl := int64(5)
	if !single {
		hl++ // window descriptor
	}
	hl += [4]int64{0, 1, 2, 4}[d&3]
	switch fcs := d >> 6; {
	case fcs == 0 && single:
		hl++
	case fcs > 0:
		hl += 1 << fcs
	}
	checksum := d&0x04 != 0
	pos := off + hl
	var bh [3]byte
	for {
		if pos+3 > size {
			return 0, read, io.ErrUnexpectedEOF
		}
		n, err := r.ReadAt(bh[:], pos)
		read += int64(n)
		if n < 3 {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, read, err
		}
		v := uint32(bh[0]) | uint32(bh[1])<<8 | uint32(bh[2])<<16
		last, typ, bs := v&1 != 0, (v>>1)&3, int64(v>>3)
		switch typ {
		case 1: // RLE
			bs = 1
		case 3:
			return 0, read, fmt.Errorf("at offset %d: reserved block type: %w", pos, errNotZstd)
		}
		if bs > zstdMaxBlock {
			return 0, read, fmt.Errorf("at offset %d: block of %d bytes: %w", pos, bs, errNotZstd)
		}
		pos += 3 + bs
		if last {
			break
		}
	}
	if checksum {
		pos += 4
	}
	if pos > size {
		return 0, read, io.ErrUnexpectedEOF
	}
	return pos, read, nil
}

// ZstdFrames returns the start offsets of the zstd frames of r, which
// holds size bytes, in order: each frame ends where the next starts,
// the last where r ends if whole is true, else it does not end within
// size (torn, or being written). It fails on bytes that are not frames.
func ZstdFrames(r io.ReaderAt, size int64) (starts []int64, whole bool, err error) {
	for off := int64(0); off < size; {
		starts = append(starts, off)
		end, _, err := ZstdFrameEnd(r, off, size)
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return starts, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		off = end
	}
	return starts, true, nil
}
