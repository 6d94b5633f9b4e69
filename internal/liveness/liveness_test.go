package liveness

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"testing/synctest"
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

// TestReaderIdle: a slow but steady stream never times out, however
// long it lasts in all; silence does, exactly Timeout after the last
// Read began. In a synctest bubble over net.Pipe: exact times.
func TestReaderIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 150 * time.Millisecond
		c, s := net.Pipe()
		defer c.Close()
		defer s.Close()
		r := bufio.NewReader(&Reader{Conn: s, Timeout: timeout})
		go func() {
			for range 6 { // 6 x 140ms: longer than the timeout in all
				time.Sleep(timeout - 10*time.Millisecond) // the sender's pace is the subject
				c.Write([]byte{1})
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
		if d := time.Since(start); d != timeout {
			t.Fatalf("timed out after %v, want %v", d, timeout)
		}
	})
}

// TestReaderStop: Stop ends a waiting Read at once, and is not reported
// as a peer timeout; every later Read fails at once too.
func TestReaderStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, s := net.Pipe()
		defer c.Close()
		defer s.Close()
		var stop atomic.Bool
		r := &Reader{Conn: s, Timeout: time.Minute, Stop: &stop}
		done := make(chan error, 1)
		start := time.Now()
		go func() { _, err := r.Read(make([]byte, 1)); done <- err }()
		synctest.Wait() // the Read waits
		stop.Store(true)
		s.SetReadDeadline(time.Now())
		if err := <-done; errors.Is(err, ErrPeerTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("stopped read: %v, want a plain deadline error", err)
		}
		if _, err := r.Read(make([]byte, 1)); errors.Is(err, ErrPeerTimeout) || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after Stop: %v, want a plain deadline error", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("stopped reads took %v, want no time", d)
		}
	})
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
