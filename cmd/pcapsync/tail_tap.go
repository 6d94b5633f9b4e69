package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/tap"
)

// tailTap streams the collector's tap for o to stdout as pcapng: it
// sends the request line and copies what comes back until the collector
// ends the stream or ctx ends. A refusal (the tap's one ERROR line) is
// the error returned.
func tailTap(ctx context.Context, o tailOptions, stdout, stderr io.Writer) error {
	d := net.Dialer{Timeout: 10 * time.Second, KeepAlive: 15 * time.Second}
	var conn net.Conn
	var err error
	if o.TLS != nil {
		conn, err = (&tls.Dialer{NetDialer: &d, Config: o.TLS}).DialContext(ctx, "tcp", o.Addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", o.Addr)
	}
	if err != nil {
		return fmt.Errorf("connecting to the tap: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := tap.FormatRequest(tap.Request{Agent: o.Agent, Iface: o.Iface, Filter: o.Filter, Token: o.Token})
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("sending the tap request: %w", err)
	}
	br := bufio.NewReaderSize(conn, 64<<10)
	// A refusal is a line starting with the protocol name; a stream
	// starts with the pcapng section header's block type, 0x0a0d0d0a.
	head, err := br.Peek(len(tap.Proto))
	if bytes.Equal(head, []byte(tap.Proto)) {
		line, _ := br.ReadString('\n')
		reason := strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(line, tap.Proto), " ERROR"))
		return fmt.Errorf("the collector refused the tap: %s", reason)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the tap: %w", err)
	}
	n, err := br.WriteTo(stdout)
	switch {
	case ctx.Err() != nil:
		return nil
	case err != nil && !errors.Is(err, net.ErrClosed):
		return fmt.Errorf("after %d bytes of the tap: %w", n, err)
	}
	fmt.Fprintf(stderr, "pcapsync tail: the collector ended the stream after %d bytes (it stopped, or dropped this client as too slow)\n", n)
	return nil
}
