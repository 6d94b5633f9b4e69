package frontdoor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// accepted runs l's Accept loop and collects what it hands on.
type accepted struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (a *accepted) n() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.conns) }

func serveAll(t *testing.T, l *Listener) *accepted {
	t.Helper()
	a := &accepted{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			a.mu.Lock()
			a.conns = append(a.conns, c)
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range a.conns {
			c.Close()
		}
	})
	return a
}

// closedByServer reports whether the server closed c (EOF or reset)
// rather than keeping it open: a read times out on an open one.
func closedByServer(c net.Conn) bool {
	if c == nil {
		return true
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestListenerCaps: connections over MaxConns, or over MaxPerSource of
// one address, are closed at once, counted and logged; the ones within
// stay open; closing one gives its place back.
func TestListenerCaps(t *testing.T) {
	var log testutil.Buffer
	l, err := Listen("127.0.0.1:0", Config{Name: "test", MaxConns: 3, MaxPerSource: 2, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	a := serveAll(t, l)
	addr := l.Addr().String()
	steps := []struct {
		src                    string
		closed                 bool
		accepted, over, source uint64
	}{
		{"127.0.0.1", false, 1, 0, 0},
		{"127.0.0.1", false, 2, 0, 0},
		{"127.0.0.1", true, 2, 0, 1}, // third of one source
		{"127.0.0.2", false, 3, 0, 1},
		{"127.0.0.3", true, 3, 1, 1}, // fourth in all
	}
	for i, s := range steps {
		c := testutil.DialFrom(t, s.src, addr)
		testutil.Eventually(t, 5*time.Second, func() error {
			got := [3]uint64{l.Counters.Accepted.Load(), l.Counters.OverLimit.Load(), l.Counters.OverSource.Load()}
			if want := [3]uint64{s.accepted, s.over, s.source}; got != want {
				return fmt.Errorf("step %d: accepted, over limit, over source %v, want %v", i, got, want)
			}
			return nil
		})
		if got := closedByServer(c); got != s.closed {
			t.Fatalf("step %d (%s): closed by the server %v, want %v", i, s.src, got, s.closed)
		}
	}
	if n := l.Counters.Open.Load(); n != 3 {
		t.Fatalf("%d open, want 3", n)
	}
	// One of 127.0.0.1's closes: 127.0.0.1 may connect again, once.
	a.mu.Lock()
	first := a.conns[0]
	a.mu.Unlock()
	first.Close()
	first.Close() // a second Close gives back nothing more
	testutil.EventuallyTrue(t, 5*time.Second, "2 open", func() bool { return l.Counters.Open.Load() == 2 })
	if c := testutil.DialFrom(t, "127.0.0.1", addr); closedByServer(c) {
		t.Fatal("a connection within the caps was closed")
	}
	testutil.EventuallyTrue(t, 5*time.Second, "4 accepted", func() bool { return a.n() == 4 })
	if c := testutil.DialFrom(t, "127.0.0.4", addr); !closedByServer(c) {
		t.Fatal("a connection over MaxConns stayed open")
	}
	if !strings.Contains(log.String(), "connection limit reached") {
		t.Errorf("the refusals are not logged:\n%s", log.String())
	}
}

// fakeListener fails every Accept with err until closed.
type fakeListener struct {
	err    error
	calls  atomic.Int64
	closed chan struct{}
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case <-f.closed:
		return nil, net.ErrClosed
	default:
	}
	f.calls.Add(1)
	return nil, f.err
}
func (f *fakeListener) Close() error   { close(f.closed); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

// TestAcceptBackoff: out of descriptors, Accept pauses with a doubling
// backoff (5 ms up to 1 s) instead of spinning, counts each failure,
// logs at most once a second, and ends at Close; another error is
// returned at once.
func TestAcceptBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logged bytes.Buffer
		f := &fakeListener{err: &net.OpError{Op: "accept", Err: syscall.EMFILE}, closed: make(chan struct{})}
		l := New(f, Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		done := make(chan error, 1)
		go func() { _, err := l.Accept(); done <- err }()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		// 5+10+...+640 ms = 1.275 s, then a second each: 10 calls in 3 s.
		if n := f.calls.Load(); n < 8 || n > 11 {
			t.Errorf("%d accepts in 3 s, want about 10 (a doubling pause up to 1 s)", n)
		}
		if n := l.Counters.AcceptErrors.Load(); n != uint64(f.calls.Load()) {
			t.Errorf("%d accept errors counted, %d happened", n, f.calls.Load())
		}
		if n := strings.Count(logged.String(), "accepting a connection failed"); n < 2 || n > 4 {
			t.Errorf("%d log lines in 3 s, want about 3 (one a second):\n%s", n, logged.String())
		}
		l.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
	f := &fakeListener{err: errors.New("broken"), closed: make(chan struct{})}
	if _, err := New(f, Config{Logger: quiet()}).Accept(); err == nil || err.Error() != "broken" || f.calls.Load() != 1 {
		t.Errorf("Accept: %v after %d calls, want the listener's error after 1", err, f.calls.Load())
	}
}

func TestTCPConn(t *testing.T) {
	l, err := Listen("127.0.0.1:0", Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	a := serveAll(t, l)
	if testutil.DialFrom(t, "127.0.0.1", l.Addr().String()) == nil {
		t.Fatal("reset")
	}
	testutil.EventuallyTrue(t, 5*time.Second, "accepted", func() bool { return a.n() == 1 })
	a.mu.Lock()
	c := a.conns[0]
	a.mu.Unlock()
	for _, x := range []net.Conn{c, &peekedConn{Conn: c}} {
		if _, ok := TCPConn(x); !ok {
			t.Errorf("TCPConn(%T): no TCP connection found", x)
		}
	}
	if _, ok := TCPConn(&net.UnixConn{}); ok {
		t.Error("TCPConn of a Unix connection found one")
	}
}
