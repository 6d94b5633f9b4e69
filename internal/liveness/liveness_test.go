package liveness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"
)

func pair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestReaderIdle: a slow but steady stream never times out, silence does.
func TestReaderIdle(t *testing.T) {
	c, s := pair(t)
	r := bufio.NewReader(&Reader{Conn: s, Timeout: 150 * time.Millisecond})
	go func() {
		for range 6 { // 6 x 60ms: longer than the timeout in all
			c.Write([]byte{1})
			time.Sleep(60 * time.Millisecond)
		}
	}()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatalf("steady trickle: %v", err)
	}
	start := time.Now()
	_, err := r.ReadByte()
	var ne net.Error
	if !errors.Is(err, ErrPeerTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("silence: %v, want ErrPeerTimeout that is a net.Error timeout", err)
	}
	if d := time.Since(start); d < 140*time.Millisecond || d > 2*time.Second {
		t.Fatalf("timed out after %v, want about 150ms", d)
	}
}

// TestReaderStop: Stop ends a waiting Read at once, and is not reported
// as a peer timeout.
func TestReaderStop(t *testing.T) {
	_, s := pair(t)
	var stop atomic.Bool
	r := &Reader{Conn: s, Timeout: time.Minute, Stop: &stop}
	done := make(chan error, 1)
	go func() { _, err := r.Read(make([]byte, 1)); done <- err }()
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	s.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if errors.Is(err, ErrPeerTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stopped read: %v, want a plain deadline error", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return after Stop")
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after Stop: %v", err)
	}
}

func TestSetUserTimeout(t *testing.T) {
	c, _ := pair(t)
	if err := SetUserTimeout(c, 6*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := SetUserTimeout(struct{ net.Conn }{c}, time.Second); err == nil {
		t.Fatal("a wrapped connection was accepted")
	}
}
