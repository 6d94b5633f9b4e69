package frontdoor

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"
)

// TLSStart is the first byte of a TLS client's first record (a
// handshake record): a listener that peeks it knows the client speaks
// TLS.
const TLSStart = 0x16

// Sniff reads conn's first byte (within conn's read deadline) and
// reports whether it starts a TLS handshake record. The connection it
// returns reads that byte again; use it instead of conn. On an error
// (a timeout, the peer closing without a byte) the returned connection
// is still conn's replacement, for an answer or Close.
func Sniff(conn net.Conn) (c net.Conn, isTLS bool, err error) {
	br := bufio.NewReaderSize(conn, 16)
	b, err := br.Peek(1)
	c = &peekedConn{Conn: conn, r: br}
	if err != nil {
		return c, false, err
	}
	return c, b[0] == TLSStart, nil
}

// peekedConn reads through r what was peeked from Conn.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite shuts down the writing side of the connection below, if
// it has one.
func (c *peekedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// NetConn returns the connection below, for TCPConn.
func (c *peekedConn) NetConn() net.Conn { return c.Conn }

// Handshake runs a TLS server handshake on conn with cfg, bounded by
// timeout and cut short when ctx ends, and returns the *tls.Conn. On an
// error the caller closes conn.
func Handshake(ctx context.Context, conn net.Conn, cfg *tls.Config, timeout time.Duration) (*tls.Conn, error) {
	tc := tls.Server(conn, cfg)
	hctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := tc.HandshakeContext(hctx); err != nil {
		return nil, err
	}
	return tc, nil
}
