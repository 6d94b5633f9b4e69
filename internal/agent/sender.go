package agent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

const writeTimeout = 30 * time.Second

// sender owns the connection: it dials, shakes hands, sends queued
// batches in sequence order, reconnects with backoff and resends from the
// first unacknowledged batch. It returns nil when ctx ends, or an error
// wrapping ErrRejected when the collector refuses the agent.
func (a *Agent) sender(ctx context.Context) error {
	backoff := a.cfg.BackoffMin
	for first := true; ; first = false {
		if ctx.Err() != nil {
			return nil
		}
		if !first {
			a.reconnects.Add(1)
		}
		conn, w, declared, err := a.connect(ctx)
		if err == nil {
			backoff = a.cfg.BackoffMin
			err = a.session(ctx, conn, w, declared)
			if err == nil {
				return nil
			}
			a.log.Warn("connection to collector lost", "err", err)
		}
		if errors.Is(err, ErrRejected) {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && conn == nil {
			a.log.Warn("cannot reach collector", "addr", a.addr.String(), "err", err, "retry_in", backoff.Round(time.Millisecond))
		}
		d := time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(d):
		}
		backoff = min(2*backoff, a.cfg.BackoffMax)
	}
}

// connect dials and shakes hands. declared is the number of interfaces
// the hello listed: a source may declare more at any moment after.
func (a *Agent) connect(ctx context.Context) (conn net.Conn, w wire.Welcome, declared int, err error) {
	d := net.Dialer{Timeout: a.cfg.DialTimeout}
	conn, err = d.DialContext(ctx, "tcp", a.addr.String())
	if err != nil {
		return nil, w, 0, err
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 20)
	}
	conn.SetDeadline(time.Now().Add(a.cfg.DialTimeout))
	hello := wire.Hello{Instance: a.instance, Codecs: 1 << wire.CodecNone, Name: a.cfg.Name, Host: a.host, Interfaces: a.interfaces()}
	if _, err := conn.Write(wire.AppendHello(nil, &hello)); err != nil {
		conn.Close()
		return nil, w, 0, fmt.Errorf("sending hello: %w", err)
	}
	fr := wire.NewFrameReader(conn, wire.Limits{})
	h, p, err := fr.Next()
	if err != nil {
		conn.Close()
		return nil, w, 0, fmt.Errorf("waiting for welcome: %w", err)
	}
	switch h.Type {
	case wire.TypeWelcome:
		w, err = wire.ParseWelcome(p)
	case wire.TypeReject:
		reason, perr := wire.ParseReject(p)
		if perr != nil {
			reason = perr.Error()
		}
		err = fmt.Errorf("%w: %s", ErrRejected, reason)
	default:
		err = fmt.Errorf("unexpected %s frame in handshake: %w", h.Type, wire.ErrUnknownType)
	}
	if err == nil && w.MaxFrame < uint32(a.q.bufCap) {
		err = fmt.Errorf("%w: collector accepts frames up to %d bytes, this agent's batches reach %d: lower the batch size or the snaplen",
			ErrRejected, w.MaxFrame, a.q.bufCap)
	}
	if err != nil {
		conn.Close()
		return nil, w, 0, err
	}
	conn.SetDeadline(time.Time{})
	return conn, w, len(hello.Interfaces), nil
}

// session runs one connection. It returns nil after a graceful goodbye
// (ctx ended), or the error that ended the connection.
func (a *Agent) session(ctx context.Context, conn net.Conn, w wire.Welcome, declared int) error {
	defer conn.Close()
	qs := a.q.stats()
	if w.LastSeq > qs.lastSeq {
		return fmt.Errorf("collector holds sequence %d, this agent sent only up to %d", w.LastSeq, qs.lastSeq)
	}
	a.q.ack(w.LastSeq)
	cursor := max(a.q.stats().acked, w.LastSeq)
	a.log.Info("connected to collector", "addr", a.addr.String(), "resume_after_seq", cursor)

	var sentMax atomic.Uint64 // highest sequence written on this connection
	sentMax.Store(cursor)
	readErr := make(chan error, 1)
	go func() { readErr <- a.readAcks(conn, &sentMax) }()

	tick := time.NewTicker(a.cfg.StatsInterval)
	defer tick.Stop()
	var st wire.Stats
	var ctl, spoolBuf []byte
	sendStats := func() error {
		a.collectStats(&st)
		ctl = wire.AppendStats(ctl[:0], &st)
		return a.write(conn, ctl)
	}
	for {
		if b := a.q.at(cursor + 1); b != nil {
			if b.nIfaces > declared {
				ifs := a.interfaces()
				for ; declared < b.nIfaces; declared++ {
					ctl = wire.AppendIface(ctl[:0], uint32(declared), &ifs[declared])
					if err := a.write(conn, ctl); err != nil {
						return err
					}
				}
			}
			frame := b.buf
			if frame == nil { // kept on disk only
				var err error
				if frame, err = a.q.spool.read(b, spoolBuf); err != nil {
					return err
				}
				spoolBuf = frame
			}
			// Raise sentMax first: the collector may acknowledge the batch
			// as soon as its last byte is in the kernel, before Write returns.
			sentMax.Store(b.seq)
			if err := a.write(conn, frame); err != nil {
				return err
			}
			cursor = b.seq
			if b.seq > a.firstSent.Load() {
				a.firstSent.Store(b.seq)
				a.sent.Add(b.packets)
			}
			continue
		}
		select {
		case <-a.q.pushed:
		case <-tick.C:
			if err := sendStats(); err != nil {
				return err
			}
		case err := <-readErr:
			return err
		case <-ctx.Done():
			// Goodbye: final counters, then half-close and wait briefly
			// for the collector to finish, so it sees a clean end of
			// stream rather than a reset.
			err := sendStats()
			if tc, ok := conn.(*net.TCPConn); ok && err == nil {
				tc.CloseWrite()
				select {
				case <-readErr:
				case <-time.After(2 * time.Second):
				}
			}
			return nil
		}
	}
}

func (a *Agent) write(conn net.Conn, b []byte) error {
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := conn.Write(b)
	return err
}

// readAcks reads the collector's frames until the connection ends.
// An ack beyond what was sent on this connection is a protocol error:
// it would release a batch still being written.
func (a *Agent) readAcks(conn net.Conn, sentMax *atomic.Uint64) error {
	fr := wire.NewFrameReader(bufio.NewReaderSize(conn, 4096), wire.Limits{})
	for {
		h, p, err := fr.Next()
		if err != nil {
			if err == io.EOF {
				return errors.New("collector closed the connection")
			}
			return err
		}
		switch h.Type {
		case wire.TypeAck:
			seq, err := wire.ParseAck(p)
			if err != nil {
				return err
			}
			if seq > sentMax.Load() {
				return fmt.Errorf("ack for batch %d, only %d sent: %w", seq, sentMax.Load(), wire.ErrMalformed)
			}
			a.q.ack(seq)
		case wire.TypeReject:
			reason, _ := wire.ParseReject(p)
			return fmt.Errorf("%w: %s", ErrRejected, reason)
		default:
			return fmt.Errorf("unexpected %s frame from collector: %w", h.Type, wire.ErrUnknownType)
		}
	}
}
