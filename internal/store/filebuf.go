package store

import "io"

// fileBuf buffers a file's writes as bufio.Writer does (the same Write,
// Flush and error rules: an error is sticky, a failed flush keeps what
// was not written), and also lends its buffer (pcapfile.Reserver): the
// pcapng writer builds a packet's block in place, its header, data and
// trailer copied once, instead of in three calls to Write.
type fileBuf struct {
	buf []byte // buf[:n] is buffered
	n   int
	dst io.Writer
	err error
}

func newFileBuf(size int) *fileBuf { return &fileBuf{buf: make([]byte, size)} }

// Reset discards what is buffered and any error, and writes to dst.
func (b *fileBuf) Reset(dst io.Writer) { b.n, b.dst, b.err = 0, dst, nil }

// Buffered returns the bytes written and not yet flushed.
func (b *fileBuf) Buffered() int { return b.n }

// Flush writes what is buffered to the destination.
func (b *fileBuf) Flush() error {
	if b.err != nil {
		return b.err
	}
	if b.n == 0 {
		return nil
	}
	m, err := b.dst.Write(b.buf[:b.n])
	if m < b.n && err == nil {
		err = io.ErrShortWrite
	}
	if err != nil {
		if m > 0 && m < b.n {
			copy(b.buf, b.buf[m:b.n])
		}
		b.n -= max(0, min(m, b.n))
		b.err = err
		return err
	}
	b.n = 0
	return nil
}

// Write buffers p, flushing when the buffer fills; with nothing
// buffered, a p larger than the buffer goes to the destination at once.
func (b *fileBuf) Write(p []byte) (nn int, err error) {
	for len(p) > len(b.buf)-b.n && b.err == nil {
		var n int
		if b.n == 0 {
			n, b.err = b.dst.Write(p)
		} else {
			n = copy(b.buf[b.n:], p)
			b.n += n
			b.Flush()
		}
		nn += n
		p = p[n:]
	}
	if b.err != nil {
		return nn, b.err
	}
	n := copy(b.buf[b.n:], p)
	b.n += n
	return nn + n, nil
}

// Reserve returns the next n bytes of the buffer, counted as written,
// for the caller to fill before its next call (flushing first if they
// do not fit); nil when n is larger than the buffer or the writer has
// failed (Write then says why).
func (b *fileBuf) Reserve(n int) []byte {
	if n > len(b.buf)-b.n && (n > len(b.buf) || b.Flush() != nil) {
		return nil
	}
	if b.err != nil {
		return nil
	}
	s := b.buf[b.n : b.n+n : b.n+n]
	b.n += n
	return s
}
