package liveness

import (
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func setUserTimeout(rc syscall.RawConn, d time.Duration) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d.Milliseconds()))
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	return nil
}
