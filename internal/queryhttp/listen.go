package queryhttp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// listener sorts the connections of a TCP listener: with TLS, a
// client whose first byte starts a TLS handshake is shaken hands with
// here (a failure is refused and counted, never handed on), any other
// is a plain one, handed on marked refused unless the listener admits
// plain clients. Accept returns the *tls.Conn, so that net/http sees
// TLS.
type listener struct {
	ln        net.Listener
	tls       *tls.Config // nil: plain HTTP only
	plain     bool        // with tls: plain clients admitted too
	handshake time.Duration
	onTLSFail func(remote string, err error)

	conns  chan net.Conn
	done   chan struct{}
	ctx    context.Context // ends with done: cuts short a peek or handshake
	cancel context.CancelFunc
	once   sync.Once
	wg     sync.WaitGroup // accept loop and sorting goroutines
}

// plainConn is a plain connection of a TLS listener, refused unless it
// is admitted.
type plainConn struct {
	net.Conn
	refused bool
}

// bufConn reads through r what was peeked from Conn.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func newListener(ln net.Listener, cfg *tls.Config, plain bool, handshake time.Duration, onTLSFail func(string, error)) *listener {
	l := &listener{ln: ln, tls: cfg, plain: plain, handshake: handshake, onTLSFail: onTLSFail,
		conns: make(chan net.Conn), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		raw, err := l.ln.Accept()
		if err != nil {
			select {
			case <-l.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: pause, as net/http does.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if c := l.sort(raw); c != nil {
				select {
				case l.conns <- c:
				case <-l.done:
					c.Close()
				}
			}
		}()
	}
}

// sort returns the connection to hand on, or nil (closed).
func (l *listener) sort(raw net.Conn) net.Conn {
	if l.tls == nil {
		return raw
	}
	raw.SetReadDeadline(time.Now().Add(l.handshake))
	stop := context.AfterFunc(l.ctx, func() { raw.SetReadDeadline(time.Now()) })
	defer stop()
	br := bufio.NewReader(raw)
	b, err := br.Peek(1)
	if err != nil {
		raw.Close()
		return nil
	}
	if b[0] != 0x16 { // not a TLS handshake record
		raw.SetReadDeadline(time.Time{})
		return &plainConn{Conn: &bufConn{raw, br}, refused: !l.plain}
	}
	tc := tls.Server(&bufConn{raw, br}, l.tls)
	ctx, cancel := context.WithTimeout(l.ctx, l.handshake)
	err = tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		l.onTLSFail(raw.RemoteAddr().String(), err)
		raw.Close()
		return nil
	}
	raw.SetReadDeadline(time.Time{})
	return tc
}

// Accept returns the next sorted connection.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close closes the listener and the connections not yet accepted, and
// waits for the goroutines sorting them.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		err = l.ln.Close()
		l.wg.Wait()
	})
	return err
}

func (l *listener) Addr() net.Addr { return l.ln.Addr() }
