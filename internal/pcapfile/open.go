package pcapfile

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// OpenMaxZstdWindow is the largest zstd window Open accepts, of a file
// an operator names: 128 MiB, the zstd command's own default limit (its
// --long files). A zstd stream declares its window and its decoder keeps
// that much of what it decoded, so a stream declaring more is refused
// (zstd.ErrWindowSizeExceeded) before it is held; the output root's
// files, which the store writes, are held to less (index.MaxZstdWindow).
const OpenMaxZstdWindow = 128 << 20

// Open opens a capture file for NewReader, decompressing it if it is
// gzip- or zstd-compressed (recognised by its first bytes, as Wireshark
// does, whatever its name): the files "pcapsync collector
// --file-compress" writes, or any .pcap.gz or .pcapng.zst. Close the
// result to close the file.
func Open(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return OpenFile(f)
}

// OpenFile is Open for a file already open (a pipe or FIFO too, read
// once from where it is): closing the result closes f, and so does an
// error.
func OpenFile(f *os.File) (io.ReadCloser, error) {
	path := f.Name()
	br := bufio.NewReaderSize(f, 256<<10)
	magic, _ := br.Peek(4)
	var r io.Reader = br
	var closeZ func()
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br) // concatenated members are one stream
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: gzip: %w", path, err)
		}
		r = zr
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(OpenMaxZstdWindow))
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("%s: zstd: %w", path, err)
		}
		r, closeZ = zr, zr.Close
	default:
		// A plain file: after the bytes peeked, read straight from the
		// file into the caller's buffer (a Reader has its own): not
		// through br, which would copy every byte once more.
		head, _ := br.Peek(br.Buffered())
		r = io.MultiReader(bytes.NewReader(head), f)
	}
	return &file{Reader: r, f: f, closeZ: closeZ}, nil
}

type file struct {
	io.Reader
	f      *os.File
	closeZ func()
}

func (f *file) Close() error {
	if f.closeZ != nil {
		f.closeZ()
	}
	return f.f.Close()
}
