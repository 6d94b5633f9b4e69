package sockopt

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// force sets a buffer beyond the system limit; false without the
// privilege (EPERM) or on any other failure.
func force(rc syscall.RawConn, rcv bool, n int) bool {
	opt := unix.SO_SNDBUFFORCE
	if rcv {
		opt = unix.SO_RCVBUFFORCE
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, opt, n)
	}); err != nil {
		return false
	}
	return serr == nil
}

func sizes(rc syscall.RawConn) (rcv, snd int) {
	rc.Control(func(fd uintptr) {
		rcv, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		snd, _ = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
	})
	return rcv, snd
}
