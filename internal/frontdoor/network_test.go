package frontdoor

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

func TestListenNetwork(t *testing.T) {
	for _, tc := range []struct{ addr, tcp, udp string }{
		{"0.0.0.0:7733", "tcp4", "udp4"},
		{"192.0.2.1:7733", "tcp4", "udp4"},
		{"[::ffff:192.0.2.1]:7733", "tcp4", "udp4"},
		{"[::]:7733", "tcp6", "udp6"},
		{"[::1]:7733", "tcp6", "udp6"},
		{"[fe80::1%eth0]:7733", "tcp6", "udp6"},
		{":7733", "tcp", "udp"},
		{"localhost:7733", "tcp", "udp"},
		{"garbage", "tcp", "udp"},
	} {
		if got := ListenNetwork("tcp", tc.addr); got != tc.tcp {
			t.Errorf("ListenNetwork(tcp, %q) = %q, want %q", tc.addr, got, tc.tcp)
		}
		if got := ListenNetwork("udp", tc.addr); got != tc.udp {
			t.Errorf("ListenNetwork(udp, %q) = %q, want %q", tc.addr, got, tc.udp)
		}
	}
}

// stacks are the loopback addresses a listener is reached by, or not.
type stacks struct{ v4, v6 bool }

var stackCases = []struct {
	addr string
	want stacks
}{
	{"0.0.0.0:0", stacks{v4: true}},
	{"[::]:0", stacks{v6: true}},
	{":0", stacks{v4: true, v6: true}},
	{"127.0.0.1:0", stacks{v4: true}},
	{"[::1]:0", stacks{v6: true}},
	{"[::ffff:127.0.0.1]:0", stacks{v4: true}},
}

func needIPv6(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln.Close()
}

// TestListenTCPStack: an IPv4 address (0.0.0.0 too) listens on IPv4
// only, an IPv6 one ([::] too) on IPv6 only, an empty host on both, as
// connections from the other stack's loopback show: refused.
func TestListenTCPStack(t *testing.T) {
	needIPv6(t)
	for _, tc := range stackCases {
		l, err := Listen(tc.addr, Config{Logger: quiet()})
		if err != nil {
			t.Fatalf("Listen(%q): %v", tc.addr, err)
		}
		serveAll(t, l)
		port := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
		for _, d := range []struct {
			host string
			want bool
		}{{"127.0.0.1", tc.want.v4}, {"::1", tc.want.v6}} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(d.host, port), 5*time.Second)
			switch {
			case d.want && err != nil:
				t.Errorf("listening on %q: connecting from %s: %v", tc.addr, d.host, err)
			case !d.want && err == nil:
				c.Close()
				t.Errorf("listening on %q (%s): a connection to %s was accepted, want refused", tc.addr, l.Addr(), d.host)
			case !d.want && !errors.Is(err, syscall.ECONNREFUSED):
				t.Errorf("listening on %q: connecting to %s: %v, want refused", tc.addr, d.host, err)
			case err == nil:
				c.Close()
			}
		}
	}
}

// TestListenUDPStack is TestListenTCPStack for UDP: a datagram to the
// other stack's loopback is answered by ICMP port unreachable, which a
// connected socket reads as ECONNREFUSED.
func TestListenUDPStack(t *testing.T) {
	needIPv6(t)
	for _, tc := range stackCases {
		conn, err := ListenUDP(tc.addr)
		if err != nil {
			t.Fatalf("ListenUDP(%q): %v", tc.addr, err)
		}
		t.Cleanup(func() { conn.Close() })
		port := strconv.Itoa(conn.LocalAddr().(*net.UDPAddr).Port)
		for _, d := range []struct {
			host string
			want bool
		}{{"127.0.0.1", tc.want.v4}, {"::1", tc.want.v6}} {
			c, err := net.Dial("udp", net.JoinHostPort(d.host, port))
			if err != nil {
				t.Fatal(err)
			}
			got := udpReaches(t, c, conn)
			c.Close()
			if got != d.want {
				t.Errorf("listening on %q (%s): a datagram to %s arrived: %v, want %v", tc.addr, conn.LocalAddr(), d.host, got, d.want)
			}
		}
	}
}

// udpReaches sends a datagram on c and reports whether srv receives it
// (true) or c reads the port unreachable (false), whichever comes first.
func udpReaches(t *testing.T, c net.Conn, srv *net.UDPConn) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	srv.SetReadDeadline(deadline)
	c.SetReadDeadline(deadline)
	arrived, refused := make(chan error, 1), make(chan error, 1)
	go func() { _, err := srv.Read(make([]byte, 16)); arrived <- err }()
	go func() { _, err := c.Read(make([]byte, 16)); refused <- err }()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	defer func() { // end the other reader
		srv.SetReadDeadline(time.Now())
		c.SetReadDeadline(time.Now())
		<-arrived
		<-refused
	}()
	select {
	case err := <-arrived:
		arrived <- err
		return err == nil
	case err := <-refused:
		refused <- err
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("reading the answer to a datagram: %v, want a datagram to arrive or ECONNREFUSED", err)
		}
		return false
	}
}
