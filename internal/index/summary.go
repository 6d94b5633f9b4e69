package index

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"
)

// summaryBuf is the read buffer of OpenSummary: the index is read in
// order, in reads of this size; a record that fits it is checked
// where it lies, a larger one (a filter of over 8000 words) through
// it.
const summaryBuf = 64 << 10

// summaryBufs keeps OpenSummary's read buffers between calls.
var summaryBufs = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, summaryBuf) }}

// OpenSummary reads the index of the data file at dataPath for its
// blocks' times, packet counts and offsets only (a summary), without
// their filters: every Block's filter is left out (Index.Summary), so
// it takes a few dozen bytes a block whatever the filters' size.
//
// It refuses what Open refuses of the index itself, with the same
// errors: an index not trusted, larger than MaxSize, damaged (every
// record's checksum is verified, filters included: they are read in
// order through a buffer, not kept), of an unknown version, not
// matching its data file's name and size (Check: every block within
// the data file). Unlike Open it does not read the data file at the
// blocks' offsets (Verify): what it gives is a block's counts and
// times, not a way to read its packets, so Probed is 0. A reader of
// packets uses Open.
func OpenSummary(dataPath string) (*Index, error) {
	df, f, limit, err := openPair(dataPath)
	if err != nil {
		return nil, err
	}
	defer df.Close()
	defer f.Close()
	ipath := Path(dataPath)
	// The file may grow after the Stat: read at most limit+1 bytes.
	lr := &io.LimitedReader{R: f, N: limit + 1}
	br := summaryBufs.Get().(*bufio.Reader)
	br.Reset(lr)
	ix, err := readSummary(br, strings.HasSuffix(dataPath, partSuffix))
	br.Reset(nil)
	summaryBufs.Put(br)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", ipath, err)
	}
	if lr.N == 0 {
		return nil, fmt.Errorf("index %s: over %d bytes: %w", ipath, limit, ErrDamaged)
	}
	if _, err := checkData(df, dataPath, ix); err != nil {
		return nil, err
	}
	return ix, nil
}

// readSummary decodes an index as Parse does (partial as Parse's),
// reading r in order, keeping no filter. It accepts exactly what Parse
// accepts, with the same blocks (FuzzSummary). A read error other
// than the end of r is returned as it is.
func readSummary(r *bufio.Reader, partial bool) (*Index, error) {
	le := binary.LittleEndian
	head := make([]byte, headerFixed+4, headerFixed+MaxNameLen+4)
	n, err := io.ReadFull(r, head)
	if err != nil && !isEnd(err) {
		return nil, err
	}
	if n == len(head) {
		if nl := int(le.Uint16(head[12:])); nl <= MaxNameLen {
			head = head[:headerFixed+nl+4]
			m, err := io.ReadFull(r, head[n:])
			if err != nil && !isEnd(err) {
				return nil, err
			}
			n += m
		}
	}
	ix, crc, _, err := parseHeader(head[:n])
	if err != nil {
		return nil, err
	}
	ix.Summary = true
	torn := func(what string) error {
		if partial {
			return nil
		}
		return fmt.Errorf("record %d: %s: %w", len(ix.All), what, ErrDamaged)
	}
	fixed := make([]byte, recHead+max(blockFixed, endSize))
	for {
		if _, err := r.Peek(1); err != nil {
			if isEnd(err) {
				return ix, nil
			}
			return nil, err
		}
		if ix.Final {
			return ix, torn("bytes after the end record")
		}
		rec, next, ok, err := readRecord(r, fixed, crc)
		if err != nil {
			return nil, err
		}
		if !ok {
			return ix, torn("truncated or checksum")
		}
		pl := rec[recHead:]
		switch rec[0] {
		case kindBlock:
			n := int(le.Uint32(rec[1:]))
			blk, _, err := decodeBlock(pl, n, ix.Version, ix.All)
			if err != nil {
				return nil, err
			}
			ix.All = append(ix.All, blk)
		case kindEnd:
			if err := ix.decodeEnd(pl); err != nil {
				return nil, err
			}
		default:
			return nil, fmt.Errorf("record kind %#x: %w", rec[0], ErrDamaged)
		}
		crc = next
	}
}

// readRecord reads the record at r's start, chained to crc: its head
// and the first bytes of its payload (up to len(buf)-recHead; the rest
// is read for the checksum only), and its checksum. ok is false for a
// record cut short or whose checksum does not verify.
func readRecord(r *bufio.Reader, buf []byte, crc uint32) (rec []byte, next uint32, ok bool, err error) {
	le := binary.LittleEndian
	h, err := r.Peek(recHead)
	if len(h) < recHead {
		return nil, 0, false, endErr(err)
	}
	n := int64(le.Uint32(h[1:]))
	keep := min(n, int64(len(buf)-recHead))
	rec = buf[:recHead+keep]
	if whole := recHead + n + 4; whole <= int64(r.Size()) {
		// The common case: the record fits the buffer, read at once.
		b, err := r.Peek(int(whole))
		if int64(len(b)) < whole {
			return nil, 0, false, endErr(err)
		}
		copy(rec, b)
		next = crc32.Update(crc, castagnoli, b[:recHead+n])
		ok = le.Uint32(b[recHead+n:]) == next
		_, err = r.Discard(int(whole))
		return rec, next, ok, err
	}
	if _, err := io.ReadFull(r, rec); err != nil {
		return nil, 0, false, endErr(err)
	}
	next = crc32.Update(crc, castagnoli, rec)
	for rest := n - keep; rest > 0; {
		b, err := r.Peek(int(min(rest, int64(r.Size()))))
		if len(b) == 0 {
			return nil, 0, false, endErr(err)
		}
		next = crc32.Update(next, castagnoli, b)
		r.Discard(len(b))
		rest -= int64(len(b))
	}
	var sum [4]byte
	if _, err := io.ReadFull(r, sum[:]); err != nil {
		return nil, 0, false, endErr(err)
	}
	return rec, next, le.Uint32(sum[:]) == next, nil
}

// isEnd reports whether err is the end of the input.
func isEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// endErr is nil for the end of the input (a record cut short), else
// err.
func endErr(err error) error {
	if isEnd(err) {
		return nil
	}
	return err
}
