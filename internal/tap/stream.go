package tap

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Defaults for the zero fields of StreamConfig.
const (
	DefaultDialTimeout = 10 * time.Second
	DefaultKeepAlive   = 15 * time.Second
)

// StreamConfig configures Stream, the client side of a tap. The zero
// value of every field but Addr means its default.
type StreamConfig struct {
	// Addr is the collector's tap listener (its --tap), HOST:PORT.
	Addr string
	// TLS, if set, secures the connection; nil is plain TCP, which a tap
	// accepts only on a loopback listener of a TLS collector, or from a
	// collector without TLS.
	TLS *tls.Config
	// Request is the request line sent (FormatRequest); its zero value
	// asks for the listener's default selection.
	Request Request
	// DialTimeout bounds connecting and the TLS handshake; it also
	// bounds sending the request. 0 means DefaultDialTimeout.
	DialTimeout time.Duration
	// KeepAlive is the TCP keep-alive period; 0 means DefaultKeepAlive.
	KeepAlive time.Duration
	// Count, if above 0, ends the stream once that many packets are
	// written, each whole (tcpdump -c); 0: no limit.
	Count int64
}

// Validate reports a StreamConfig Stream would refuse.
func (c *StreamConfig) Validate() error {
	switch {
	case c.Addr == "":
		return errors.New("tap: no address")
	case c.DialTimeout < 0 || c.KeepAlive < 0:
		return errors.New("tap: negative timeout")
	case c.Count < 0:
		return fmt.Errorf("tap: count %d is negative", c.Count)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("tap: address %q: %w", c.Addr, err)
	}
	return nil
}

// Stream connects to a tap, sends cfg.Request and copies the pcapng
// stream that comes back to w, unchanged, until ctx ends or Count
// packets are written (it then returns nil) or the collector ends the
// stream (an error wrapping ErrStreamEnded). A refusal is an error wrapping ErrRefused with the
// collector's reason; anything else that breaks the stream is returned
// as it is. n counts the bytes written to w.
func Stream(ctx context.Context, cfg StreamConfig, w io.Writer) (n int64, err error) {
	if err := cfg.Validate(); err != nil {
		return 0, err
	}
	timeout := cmp.Or(cfg.DialTimeout, DefaultDialTimeout)
	d := net.Dialer{Timeout: timeout, KeepAlive: cmp.Or(cfg.KeepAlive, DefaultKeepAlive)}
	var conn net.Conn
	if cfg.TLS != nil {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: cfg.TLS}).DialContext(ctx, "tcp", cfg.Addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", cfg.Addr)
	}
	if err != nil {
		return 0, fmt.Errorf("connecting to the tap: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	conn.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(conn, FormatRequest(cfg.Request)); err != nil {
		return 0, fmt.Errorf("sending the tap request: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	// A refusal is a line starting with the protocol name; a stream
	// starts with the pcapng section header's block type, 0x0a0d0d0a.
	head, err := br.Peek(len(Proto))
	if bytes.Equal(head, []byte(Proto)) {
		line, _ := br.ReadString('\n')
		reason := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, Proto), " ERROR"))
		return 0, fmt.Errorf("%w: %s", ErrRefused, reason)
	}
	if err != nil && ctx.Err() == nil {
		return 0, fmt.Errorf("reading the tap: %w", err)
	}
	if cfg.Count > 0 {
		w = &packetCounter{w: w, limit: cfg.Count}
	}
	n, err = br.WriteTo(w)
	switch {
	case ctx.Err() != nil || errors.Is(err, errCounted):
		return n, nil
	case err != nil && !errors.Is(err, net.ErrClosed):
		return n, fmt.Errorf("after %d bytes of the tap: %w", n, err)
	}
	return n, fmt.Errorf("%w after %d bytes (it stopped, or dropped this client as too slow)", ErrStreamEnded, n)
}
