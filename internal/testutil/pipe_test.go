package testutil

import (
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
)

func TestPipeListener(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := NewPipeListener()
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				t.Errorf("Accept: %v", err)
			}
			accepted <- c
		}()
		c, err := l.Dial(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		s := <-accepted
		go c.Write([]byte("hi"))
		buf := make([]byte, 2)
		if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hi" {
			t.Fatalf("read %q, %v", buf, err)
		}
		c.Close()
		s.Close()
		l.Close()
		if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v", err)
		}
		if _, err := l.Dial(t.Context()); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Dial after Close: %v", err)
		}
	})
}
