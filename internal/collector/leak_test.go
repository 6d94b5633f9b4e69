package collector

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestGoroutinesBackToBaseline runs 200 connect and fault cycles against
// a real Server (garbage, half a header, a hello then an abrupt close, a
// bad name, a good session with a batch, a corrupt batch) and checks
// that the goroutine count returns to where it was.
func TestGoroutinesBackToBaseline(t *testing.T) {
	c := newCore(t, Config{Insecure: true, HandshakeTimeout: time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(c).Serve(ctx, ln) }()
	defer func() { cancel(); <-served; c.Close() }()
	addr := ln.Addr().String()

	good := func(name string, seq uint64, corrupt bool) []byte {
		var e wire.BatchEncoder
		e.Reset(nil)
		e.Append(int64(seq), 0, 4, []byte("data"))
		f := append(wire.AppendHello(nil, hello(name, byte(seq))), e.Finish(seq)...)
		if corrupt {
			f[len(f)-1] ^= 0xff
		}
		return f
	}
	cycles := []func(net.Conn){
		func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\n\r\n")) },
		func(c net.Conn) { c.Write([]byte{wire.Magic, wire.Version}) },
		func(c net.Conn) { c.Write(wire.AppendHello(nil, hello("abrupt", 1))) },
		func(c net.Conn) { c.Write(wire.AppendHello(nil, hello("../bad", 2))) },
		func(c net.Conn) { c.Write(good("good", 1, false)); readSome(c) },
		func(c net.Conn) { c.Write(good("corrupt", 1, true)); readSome(c) },
	}
	runtime.GC()
	before := runtime.NumGoroutine()
	for i := range 200 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		cycles[i%len(cycles)](conn)
		conn.Close()
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if after := runtime.NumGoroutine(); after > before {
			return goroutinesLeft{before, after}
		}
		return nil
	})
	t.Logf("goroutines: %d before, %d after 200 fault cycles", before, runtime.NumGoroutine())
}

// readSome waits for the collector's first reply (welcome or reject).
func readSome(c net.Conn) {
	var b [64]byte
	c.Read(b[:])
}

// goroutinesLeft says how many goroutines outlived the fault cycles and
// shows every goroutine's stack; the stacks are taken only when the
// error is printed.
type goroutinesLeft struct{ before, after int }

func (g goroutinesLeft) Error() string {
	buf := make([]byte, 1<<20)
	return fmt.Sprintf("%d goroutines before 200 fault cycles, %d after:\n%s", g.before, g.after, buf[:runtime.Stack(buf, true)])
}
