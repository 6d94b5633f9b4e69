package testutil

import (
	"context"
	"net"
	"sync"
)

// PipeListener is a net.Listener whose connections are in-memory
// net.Pipe pairs, for servers tested inside a testing/synctest bubble,
// where real sockets do not work (a goroutine blocked on a socket is not
// durably blocked, so the bubble's clock would never advance). Make it
// inside the bubble. A net.Pipe has no buffer: every Write waits for the
// peer's Read, so a test's client must read while it writes (replies,
// heartbeats) or the server's writes stall.
type PipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

// NewPipeListener returns an open PipeListener.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept waits for a Dial and returns the server's end of its pipe, or
// net.ErrClosed once the listener is closed.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial fail with net.ErrClosed; connections
// already made stay open. It is safe to call more than once.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

// Addr returns a placeholder address.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial waits until Accept takes the connection and returns the client's
// end, or fails with net.ErrClosed or ctx's error.
func (l *PipeListener) Dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.closed:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
