package testutil

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// DialFrom connects over TCP to addr from the local address src (a
// loopback address such as 127.0.0.2, so that a test can be several
// sources) and closes the connection when t ends. It returns nil when
// the server reset the connection before Dial returned, as a listener
// over its connection cap does; any other error fails t.
func DialFrom(t testing.TB, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
