package liveness

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestUserTimeoutLinux(t *testing.T) {
	c, _ := pair(t)
	if err := SetUserTimeout(c, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	rc, _ := c.(*net.TCPConn).SyscallConn()
	var ms int
	var serr error
	rc.Control(func(fd uintptr) { ms, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT) })
	if serr != nil || ms != 6000 {
		t.Fatalf("TCP_USER_TIMEOUT = %dms, %v; want 6000", ms, serr)
	}
}
