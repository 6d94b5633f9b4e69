package query

import (
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fileWritev returns a function writing its pieces to w with writev
// when w is a file (a regular file, a pipe: what -w and stdout are),
// else nil. It reuses one iovec array, so a write makes no garbage but
// the poller's closure.
func fileWritev(w io.Writer) func([][]byte) error {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	iov := make([]unix.Iovec, 0, vecMax)
	return func(bufs [][]byte) error {
		for {
			iov = iov[:0]
			for _, b := range bufs {
				if len(b) > 0 {
					v := unix.Iovec{Base: &b[0]}
					v.SetLen(len(b))
					iov = append(iov, v)
				}
			}
			if len(iov) == 0 {
				return nil
			}
			var n uintptr
			var errno unix.Errno
			if err := rc.Write(func(fd uintptr) bool {
				for {
					n, _, errno = unix.Syscall(unix.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
					if errno != unix.EINTR {
						return errno != unix.EAGAIN
					}
				}
			}); err != nil {
				return err
			}
			if errno != 0 {
				return &os.PathError{Op: "writev", Path: f.Name(), Err: errno}
			}
			if n == 0 {
				return io.ErrShortWrite
			}
			bufs = advance(bufs, int(n))
		}
	}
}
