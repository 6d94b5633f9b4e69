// Package liveness detects dead peers on stream connections within
// seconds, where TCP alone takes up to 15 minutes: a Reader that fails
// once the peer sent nothing for a timeout (the peer sends heartbeats
// when idle), and TCP_USER_TIMEOUT, which fails a connection whose sent
// data the peer's kernel has not acknowledged for as long (a partition,
// or a peer host that is gone).
package liveness

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Heartbeat and peer timeout defaults, the same on agent and collector:
// a peer sends something at least every DefaultHeartbeat, and one silent
// for DefaultPeerTimeout (three heartbeats) is taken for dead.
const (
	DefaultHeartbeat   = 2 * time.Second
	DefaultPeerTimeout = 6 * time.Second
)

// Reader reads from Conn with a read deadline of Timeout renewed before
// every Read: a Read fails only when nothing at all arrives for Timeout,
// however long a whole message takes. Wrap it in a bufio.Reader, so that
// the deadline is renewed once per buffer fill, not per frame. Timeout
// may be changed between Reads; while it is 0 the Reader leaves Conn's
// deadline alone (for a fixed deadline, such as a handshake's).
type Reader struct {
	Conn    net.Conn
	Timeout time.Duration
	// Stop, if not nil, cuts reading short: once it is true, every Read
	// fails at once with a plain timeout (not ErrPeerTimeout). Whoever
	// sets it should also set Conn's read deadline to now, for a Read
	// already waiting.
	Stop *atomic.Bool
}

// Read implements io.Reader.
func (r *Reader) Read(p []byte) (int, error) {
	if r.Timeout > 0 {
		r.Conn.SetReadDeadline(time.Now().Add(r.Timeout))
	}
	stopping := r.Stop != nil && r.Stop.Load()
	if stopping {
		// Checked after renewing the deadline: a Stop set meanwhile
		// either sees our deadline and overrides it, or we see Stop.
		r.Conn.SetReadDeadline(time.Now())
	}
	n, err := r.Conn.Read(p)
	if err != nil && r.Timeout > 0 && !stopping && !(r.Stop != nil && r.Stop.Load()) {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			err = &timeoutError{fmt.Errorf("%w for %s: %w", ErrPeerTimeout, r.Timeout, err)}
		}
	}
	return n, err
}

type timeoutError struct{ error }

func (e *timeoutError) Unwrap() error   { return e.error }
func (e *timeoutError) Timeout() bool   { return true }
func (e *timeoutError) Temporary() bool { return false }

// SetUserTimeout sets TCP_USER_TIMEOUT on conn (Linux; elsewhere it does
// nothing and returns nil): once data it sent stays unacknowledged by
// the peer for d, the kernel fails the connection. conn must be the
// TCP connection itself (for TLS, the one below it).
func SetUserTimeout(conn net.Conn, d time.Duration) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %T is not a socket", conn)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("setting TCP_USER_TIMEOUT: %w", err)
	}
	return setUserTimeout(rc, d)
}
