package collector

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// repairAll finishes every file a previous run left unfinished (see
// repairPart) and raises each instance's high-water mark to the last
// batch its files hold.
func (c *Core) repairAll() error {
	ents, err := os.ReadDir(c.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("collector: reading %s: %w", c.dir, err)
	}
	var repaired []string
	for _, e := range ents {
		if !e.IsDir() || wire.ValidateName(e.Name()) != nil {
			continue
		}
		dir := filepath.Join(c.dir, e.Name())
		parts, err := filepath.Glob(filepath.Join(dir, "*.pcapng*"+PartSuffix))
		if err != nil {
			return err
		}
		for _, p := range parts {
			marks, kept, cut, err := repairPart(p)
			if err != nil {
				c.Counters.FileErrors.Add(1)
				c.log.Error("repairing unfinished file; left as it is", "file", p, "err", err)
				continue
			}
			if kept == 0 {
				c.log.Warn("removed unfinished file holding no acknowledged batch", "file", p, "bytes", cut)
				continue
			}
			c.log.Warn("repaired unfinished file", "file", strings.TrimSuffix(p, PartSuffix), "kept_bytes", kept, "cut_bytes", cut)
			for id, seq := range marks {
				c.instance(id, e.Name()).raise(seq)
			}
			repaired = append(repaired, p)
		}
	}
	// Only .part files are scanned on start: save the marks they held
	// before they lose the suffix, or a second crash would forget them.
	// A crash before the renames repeats the repair, which is idempotent.
	if len(repaired) > 0 {
		if err := c.saveState(); err != nil {
			return fmt.Errorf("collector: saving state after repair: %w", err)
		}
	}
	for _, p := range repaired {
		if err := os.Rename(p, strings.TrimSuffix(p, PartSuffix)); err != nil {
			return fmt.Errorf("collector: %w", err)
		}
		if err := syncDir(filepath.Dir(p)); err != nil {
			return fmt.Errorf("collector: %w", err)
		}
	}
	return nil
}

// repairPart walks an unfinished file's blocks, cuts it back to the end
// of the last complete batch mark (dropping a torn tail and any batch
// that was not complete) and syncs it; the caller renames it once the
// marks are saved. A file without a mark holds nothing acknowledged and
// is removed. It returns the highest mark per instance and the bytes
// kept and cut.
//
// A gzip file (.pcapng.gz.part) is cut back to the end of the last
// complete member that holds a mark instead; a zstd file
// (.pcapng.zst.part) is written again (see repairZstd).
func repairPart(path string) (marks map[[16]byte]uint64, kept, cut int64, err error) {
	codec := FileNone
	switch name := strings.TrimSuffix(path, PartSuffix); {
	case strings.HasSuffix(name, ".pcapng.gz"):
		codec = FileGzip
	case strings.HasSuffix(name, ".pcapng.zst"):
		codec = FileZstd
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, 0, err
	}
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	size := st.Size()
	marks = map[[16]byte]uint64{}
	var end int64
	if codec == FileNone {
		end, _ = scanBlocks(f, size, true, marks)
	} else if codec == FileGzip {
		first := true
		member := map[[16]byte]uint64{}
		gzipMembers(f, func(content []byte, memberEnd int64) bool {
			clear(member)
			markEnd, off := scanBlocks(bytes.NewReader(content), int64(len(content)), first, member)
			if off != int64(len(content)) {
				return false // not whole blocks: not ours, or damaged
			}
			first = false
			for id, seq := range member {
				marks[id] = max(marks[id], seq)
			}
			if markEnd > 0 {
				end = memberEnd
			}
			return true
		})
	} else {
		f.Close()
		f = nil
		kept, cut, err := repairZstd(path, marks)
		return marks, kept, cut, err
	}
	if end == 0 {
		f.Close()
		f = nil
		return marks, 0, size, os.Remove(path)
	}
	if err := f.Truncate(end); err != nil {
		return nil, 0, 0, err
	}
	if err := f.Sync(); err != nil {
		return nil, 0, 0, err
	}
	if err := f.Close(); err != nil {
		f = nil
		return nil, 0, 0, err
	}
	f = nil
	return marks, end, size - end, nil
}

// scanBlocks walks the pcapng blocks of r (size bytes), which starts
// with a section header block if first, and records every batch mark it
// finds in marks. It returns the offset just after the last block that
// carries a mark (0 if none) and the offset where the blocks stopped
// being whole (size if they all are).
func scanBlocks(r io.Reader, size int64, first bool, marks map[[16]byte]uint64) (end, off int64) {
	br := bufio.NewReaderSize(r, 256<<10)
	var hdr [8]byte
	var block []byte // an EPB with options, read whole
	for ; ; first = false {
		if _, err := io.ReadFull(br, hdr[:]); err != nil {
			return end, off
		}
		typ := binary.LittleEndian.Uint32(hdr[0:])
		n := int64(binary.LittleEndian.Uint32(hdr[4:]))
		if n < 12 || n%4 != 0 || off+n > size || first && typ != 0x0A0D0D0A {
			return end, off // torn or not ours: stop here
		}
		if typ == 6 && n <= maxRepairBlock {
			// An EPB: read it whole and look for a mark among its options.
			if cap(block) < int(n) {
				block = make([]byte, n)
			}
			block = block[:n]
			copy(block, hdr[:])
			if _, err := io.ReadFull(br, block[8:]); err != nil || int64(binary.LittleEndian.Uint32(block[n-4:])) != n {
				return end, off
			}
			if id, seq, ok := findMark(block); ok {
				marks[id] = max(marks[id], seq)
				end = off + n
			}
		} else {
			if _, err := br.Discard(int(n - 12)); err != nil {
				return end, off
			}
			var tr [4]byte
			if _, err := io.ReadFull(br, tr[:]); err != nil || int64(binary.LittleEndian.Uint32(tr[:])) != n {
				return end, off
			}
		}
		off += n
	}
}

// maxRepairBlock bounds the packet blocks repair reads whole: a packet
// of the largest snaplen plus its header and options.
const maxRepairBlock = 262144 + 1024

// findMark returns the batch mark among an EPB's options, if any.
func findMark(b []byte) (id [16]byte, seq uint64, ok bool) {
	if len(b) < 32 {
		return id, 0, false
	}
	caplen := int64(binary.LittleEndian.Uint32(b[20:]))
	o := 28 + caplen + (-caplen & 3)
	for o+4 <= int64(len(b))-4 {
		code := binary.LittleEndian.Uint16(b[o:])
		l := int64(binary.LittleEndian.Uint16(b[o+2:]))
		if code == 0 || o+4+l > int64(len(b))-4 {
			break
		}
		v := b[o+4 : o+4+l]
		if code == pcapfile.OptCustomBinaryNoCopy && l == 4+markSize &&
			binary.LittleEndian.Uint32(v) == markPEN && [4]byte(v[4:8]) == markMagic {
			return [16]byte(v[8:24]), binary.LittleEndian.Uint64(v[24:]), true
		}
		o += 4 + l + (-l & 3)
	}
	return id, 0, false
}
