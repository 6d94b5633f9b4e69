package agent

import (
	"bytes"
	"io"
	"math"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mapFile maps f, a plain (uncompressed) capture file, read-only for a
// replay, so that its packets are copied once, into the batches, and not
// first through a read buffer; the mapping then owns f. It returns nil,
// f untouched, where it cannot (not a regular file, empty, compressed,
// or the mapping failed): the caller reads f.
func mapFile(f *os.File) *mapping {
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Size() < 4 || int64(int(st.Size())) != st.Size() {
		return nil
	}
	var magic [4]byte
	if _, err := f.ReadAt(magic[:], 0); err != nil {
		return nil
	}
	if bytes.HasPrefix(magic[:], []byte{0x1f, 0x8b}) || bytes.Equal(magic[:], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		return nil // gzip or zstd: pcapfile.OpenFile decompresses it
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	_ = unix.Madvise(data, unix.MADV_SEQUENTIAL)
	return &mapping{f: f, data: data}
}

// mapping is a file mapped by mapFile.
type mapping struct {
	f    *os.File
	data []byte
	done int // data[:done] has been given back (release)
}

// rest reads what the file holds past the mapping (what was appended
// to it since it was mapped), with read(2).
func (m *mapping) rest() io.Reader {
	return io.NewSectionReader(m.f, int64(len(m.data)), math.MaxInt64-int64(len(m.data)))
}

// cut reports whether the file is now shorter than the mapping: its
// pages past the new end read as zeros up to the end of that page and
// fault after it. A file that cannot be looked at is not called cut.
func (m *mapping) cut() bool {
	st, err := m.f.Stat()
	return err == nil && st.Size() < int64(len(m.data))
}

// holds reports whether addr is in the mapping.
func (m *mapping) holds(addr uintptr) bool {
	return len(m.data) > 0 && uint64(m.offset(addr)) < uint64(len(m.data))
}

// offset is addr's offset in the file (addr held).
func (m *mapping) offset(addr uintptr) int64 {
	return int64(addr - uintptr(unsafe.Pointer(unsafe.SliceData(m.data))))
}

// releaseStep is how far a replay reads past what it gave back before
// it gives back more: the pages of the mapping behind it leave the
// process's resident set (they stay in the page cache), so that a long
// replay's RSS does not grow to the size of its file.
const releaseStep = 1 << 20

// release gives back the pages of the mapping wholly before off, every
// releaseStep bytes: the reader has copied every packet there.
func (m *mapping) release(off int64) {
	end := int(min(off, int64(len(m.data)))) &^ (os.Getpagesize() - 1)
	if end-m.done < releaseStep {
		return
	}
	_ = unix.Madvise(m.data[m.done:end], unix.MADV_DONTNEED)
	m.done = end
}

// Close unmaps the file and closes it; nothing may touch its data after.
func (m *mapping) Close() error {
	err := unix.Munmap(m.data)
	m.data = nil
	if cerr := m.f.Close(); err == nil {
		err = cerr
	}
	return err
}
