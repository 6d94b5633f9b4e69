package queryhttp

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
)

// listener sorts the connections of a front door (its caps applied
// before anything is read): with TLS, a
// client whose first byte starts a TLS handshake is shaken hands with
// here (a failure is refused and counted, never handed on), any other
// is a plain one, handed on marked refused unless the listener admits
// plain clients. Accept returns the *tls.Conn, so that net/http sees
// TLS.
type listener struct {
	ln        *frontdoor.Listener
	tls       *tls.Config // nil: plain HTTP only
	plain     bool        // with tls: plain clients admitted too
	handshake time.Duration
	onTLSFail func(remote string, err error)

	conns  chan net.Conn
	failed chan error // the accept loop's end
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

func newListener(ln *frontdoor.Listener, cfg *tls.Config, plain bool, handshake time.Duration, onTLSFail func(string, error)) *listener {
	l := &listener{ln: ln, tls: cfg, plain: plain, handshake: handshake, onTLSFail: onTLSFail,
		conns: make(chan net.Conn), failed: make(chan error, 1), done: make(chan struct{})}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.wg.Add(1)
	go l.acceptLoop()
	return l
}

func (l *listener) acceptLoop() {
	defer l.wg.Done()
	for {
		raw, err := l.ln.Accept() // pauses itself when out of descriptors
		if err != nil {
			l.failed <- err // net.ErrClosed after Close; else Accept returns it
			return
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
	c, isTLS, err := frontdoor.Sniff(raw)
	if err != nil {
		raw.Close()
		return nil
	}
	if !isTLS {
		raw.SetReadDeadline(time.Time{})
		return &plainConn{Conn: c, refused: !l.plain}
	}
	tc, err := frontdoor.Handshake(l.ctx, c, l.tls, l.handshake)
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
	case err := <-l.failed:
		l.failed <- err // for the next call
		return nil, err
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
