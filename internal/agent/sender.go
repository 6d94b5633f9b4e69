package agent

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/wire"
)

const writeTimeout = 30 * time.Second

// tcpSender is the TCP transport: one connection at a time (TLS unless
// Config.Insecure), every batch kept until acknowledged and resent
// after a reconnect, to the same collector or the next in
// Config.Collectors. Its fields belong to the sender goroutine (run).
type tcpSender struct {
	a         *Agent
	cur       int       // index in a.collectors of the collector tried or connected
	lastWrite time.Time // of the last write to the collector
	// dial, if set, replaces the TCP dial to the collector at addr
	// (tests: an in-memory connection inside a testing/synctest
	// bubble). Options that only a socket has are applied only to a
	// *net.TCPConn.
	dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
}

func (t *tcpSender) batchLimits() (batchBytes, bufCap int) {
	c := &t.a.cfg
	return c.BatchBytes, wire.HeaderSize + wire.BatchHeaderSize + c.BatchBytes + c.SnapLen + wire.RecordMaxOverhead
}

func (t *tcpSender) prepareQueue(q *queue) { t.a.observeAckLatency(q) }

// observeAckLatency has q observe Config.AckLatency, if set.
func (a *Agent) observeAckLatency(q *queue) {
	if obs := a.cfg.AckLatency; obs != nil {
		q.ackLatency = obs
		// Never 0 (0 means "not sent yet"): monotonic nanoseconds from
		// one before the start.
		start := a.start
		q.clock = func() int64 { return int64(time.Since(start)) + 1 }
	}
}

// ownTraffic excludes the connections to every collector.
func (t *tcpSender) ownTraffic() string {
	return t.a.excludeCollectors(func(ap netip.AddrPort) string {
		return fmt.Sprintf("tcp and host %s and port %d", ap.Addr(), ap.Port())
	})
}

func (t *tcpSender) replayRate() float64 { return 0 }

func (t *tcpSender) report(*Stats) {}

func (t *tcpSender) warnInsecure(log *slog.Logger) {
	if t.a.cfg.TLS == nil {
		log.Warn("INSECURE: plain TCP, no TLS: captured packets cross the network in clear text and the collector is not authenticated")
	}
}

// run owns the connection: it dials, shakes hands, sends queued
// batches in sequence order, reconnects with backoff and resends from the
// first unacknowledged batch.
//
// With several collectors it stays with the one it is connected to
// and, when a connection to it cannot be made or is lost, moves on to
// the next in the list (after the last: the first), at once; it waits
// out the backoff after every round of len(Collectors) attempts that
// made no progress (with one collector: after every such attempt). The
// backoff doubles after every such wait, up to BackoffMax, and starts
// again from BackoffMin once a connection makes progress: the collector
// acknowledges a batch beyond what it and the queue held at the
// welcome. So a collector that welcomes agents but cannot store their
// batches (a full disk, an unwritable directory) is retried ever more
// slowly, not every BackoffMin.
//
// It returns nil when ctx ends, or an error wrapping ErrRejected when a
// collector refuses the agent, or ErrTLS when TLS authentication fails
// before any connection succeeded: configuration errors, which no other
// collector of the list is tried for. Once connected, the agent retries
// after a TLS failure instead (a collector may be getting a new
// certificate).
func (t *tcpSender) run(ctx context.Context) error {
	a := t.a
	n := len(a.collectors)
	backoff := a.cfg.BackoffMin
	connected := false
	fails := 0 // attempts without progress since the last progress
	for first := true; ; first = false {
		if ctx.Err() != nil {
			return nil
		}
		if !first {
			a.reconnects.Add(1)
		}
		ep := &a.collectors[t.cur]
		c, w, declared, err := t.connect(ctx, ep)
		lost := false
		if err == nil {
			connected = true
			held := max(a.q.stats().acked, w.LastSeq)
			err = t.session(ctx, ep, c, w, declared)
			if err == nil {
				return nil
			}
			if a.q.stats().acked > held {
				backoff = a.cfg.BackoffMin
				fails = 0
			}
			lost = true
		}
		if errors.Is(err, ErrRejected) || errors.Is(err, ErrTLS) && !connected {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		fails++
		var delay time.Duration // 0: the next collector at once
		if fails%n == 0 {
			delay = time.Duration(float64(backoff) * (0.75 + 0.5*rand.Float64()))
		}
		switch {
		case lost:
			a.log.Warn("connection to collector lost", "addr", ep.name, "err", err, "retry_in", delay.Round(time.Millisecond))
		case c == nil:
			level := slog.LevelWarn
			if errors.Is(err, ErrTLS) {
				level = slog.LevelError
			}
			a.log.Log(ctx, level, "cannot reach collector", "addr", ep.name, "err", err, "retry_in", delay.Round(time.Millisecond))
		}
		if n > 1 {
			t.cur = (t.cur + 1) % n
			a.failovers.Add(1)
			a.log.Warn("failing over to the next collector", "from", ep.name, "to", a.collectors[t.cur].name, "in", delay.Round(time.Millisecond))
		}
		if delay == 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		backoff = min(2*backoff, a.cfg.BackoffMax)
	}
}

// excludeCollectors returns a capture filter that excludes the traffic
// clause(addr) matches for every collector: "not (CLAUSE)" for one,
// "not ((CLAUSE1) or (CLAUSE2) ...)" for several (pcap-filter's "and"
// and "or" bind equally, so each clause is parenthesised).
func (a *Agent) excludeCollectors(clause func(netip.AddrPort) string) string {
	addrs := make([]netip.AddrPort, len(a.collectors))
	for i, ep := range a.collectors {
		addrs[i] = ep.addr
	}
	return excludeAddrs(addrs, clause)
}

// excludeAddrs is excludeCollectors for the addresses addrs (at least
// one).
func excludeAddrs(addrs []netip.AddrPort, clause func(netip.AddrPort) string) string {
	if len(addrs) == 1 {
		return "not (" + clause(addrs[0]) + ")"
	}
	var b strings.Builder
	b.WriteString("not (")
	for i, ap := range addrs {
		if i > 0 {
			b.WriteString(" or ")
		}
		b.WriteString("(" + clause(ap) + ")")
	}
	b.WriteString(")")
	return b.String()
}

// link is one connection to the collector.
type link struct {
	net.Conn          // TLS, or raw itself
	raw      net.Conn // the connection under TLS: a *net.TCPConn but in tests
}

// abort closes the connection with a reset, not a FIN (nor a TLS
// close_notify): the collector must not take it for a goodbye.
func (c *link) abort() {
	if tc, ok := c.raw.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.raw.Close()
}

// connect dials and shakes hands (TLS, then hello and welcome). declared
// is the number of interfaces the hello listed: a source may declare
// more at any moment after.
func (t *tcpSender) connect(ctx context.Context, ep *endpoint) (c *link, w wire.Welcome, declared int, err error) {
	a := t.a
	var nc net.Conn
	if t.dial != nil {
		nc, err = t.dial(ctx, ep.addr)
	} else {
		d := net.Dialer{Timeout: a.cfg.DialTimeout}
		nc, err = d.DialContext(ctx, "tcp", ep.addr.String())
	}
	if err != nil {
		return nil, w, 0, err
	}
	c = &link{Conn: nc, raw: nc}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetWriteBuffer(4 << 20)
		if err := liveness.SetUserTimeout(tc, a.cfg.PeerTimeout); err != nil {
			a.log.Debug("TCP_USER_TIMEOUT not set", "err", err)
		}
	}
	fail := func(err error) (*link, wire.Welcome, int, error) {
		c.abort()
		return nil, w, 0, err
	}
	c.raw.SetDeadline(time.Now().Add(a.cfg.DialTimeout))
	if ep.tls != nil {
		tc := tls.Client(c.raw, ep.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fail(tlsError("TLS handshake", err))
		}
		c.Conn = tc
	}
	hello := a.hello()
	if _, err := c.Write(wire.AppendHello(nil, &hello)); err != nil {
		return fail(tlsError("sending hello", err))
	}
	fr := wire.NewFrameReader(c, wire.Limits{})
	h, p, err := fr.Next()
	if err != nil {
		return fail(tlsError("waiting for welcome", err))
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
	if c := a.cfg.Compress.Wire(); err == nil && c != wire.CodecNone && w.Codecs&(1<<c) == 0 {
		err = fielderr.Errorf("%w: collector does not accept %s-compressed batches (an older version?): run the agent with {agent.Compress} none",
			ErrRejected, c)
	}
	if err == nil && w.MaxFrame < uint32(a.q.bufCap) {
		err = fmt.Errorf("%w: collector accepts frames up to %d bytes, this agent's batches reach %d: lower the batch size or the snaplen",
			ErrRejected, w.MaxFrame, a.q.bufCap)
	}
	if err == nil && w.Codecs&wire.FeatureInfo != 0 && a.cfg.Version != "" {
		// Only a collector that said it takes one: an older one ends
		// the connection at an unknown frame type.
		if _, werr := c.Write(wire.AppendInfo(nil, &wire.Info{Version: a.cfg.Version})); werr != nil {
			err = tlsError("sending info", werr)
		}
	}
	if err != nil {
		return fail(err)
	}
	c.raw.SetDeadline(time.Time{})
	return c, w, len(hello.Interfaces), nil
}

// tlsError wraps err in ErrTLS, with a hint, if it is a TLS failure:
// the collector's certificate does not verify, the collector refused
// ours (a TLS alert), or the collector does not speak TLS. Other errors
// (the network) come back as they are.
func tlsError(during string, err error) error {
	var cve *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var oe *net.OpError
	switch {
	case errors.As(err, &cve):
		return fmt.Errorf("%w: %s: the collector's certificate does not verify (check --tls-ca and --tls-server-name): %w", ErrTLS, during, err)
	case errors.As(err, &rh):
		hint := "the collector does not speak TLS"
		if rh.RecordHeader[0] == wire.Magic {
			hint = "the collector speaks plain TCP (--insecure); give both sides the same setting"
		}
		return fmt.Errorf("%w: %s: %s: %w", ErrTLS, during, hint, err)
	case errors.As(err, &oe) && oe.Op == "remote error":
		return fmt.Errorf("%w: %s: the collector refused this agent (check --tls-cert and --tls-key, and that the collector's --tls-client-ca signed them): %w", ErrTLS, during, err)
	}
	return fmt.Errorf("%s: %w", during, err)
}

// session runs one connection. It returns nil after a graceful goodbye
// (ctx ended), or the error that ended the connection.
func (t *tcpSender) session(ctx context.Context, ep *endpoint, conn *link, w wire.Welcome, declared int) (err error) {
	a := t.a
	readErr := make(chan error, 1)
	defer func() {
		if err != nil {
			conn.abort()
			// A write that failed because the ack reader gave up (and
			// cut the writes short) reports the reader's reason.
			select {
			case rerr := <-readErr:
				err = rerr
			default:
			}
		} else {
			conn.raw.Close()
		}
	}()
	qs := a.q.stats()
	if w.LastSeq > qs.lastSeq {
		return fmt.Errorf("collector holds sequence %d, this agent sent only up to %d", w.LastSeq, qs.lastSeq)
	}
	a.q.ack(w.LastSeq)
	cursor := max(a.q.stats().acked, w.LastSeq)
	a.log.Info("connected to collector", "addr", ep.name, "resume_after_seq", cursor)
	a.connected.Store(true)
	defer a.connected.Store(false)

	var sentMax atomic.Uint64 // highest sequence written on this connection
	sentMax.Store(cursor)
	go func() {
		err := t.readAcks(conn, &sentMax)
		readErr <- err
		// Unblock a write waiting on a dead collector.
		conn.raw.SetWriteDeadline(time.Now())
	}()
	hb := time.NewTimer(a.cfg.Heartbeat)
	defer hb.Stop()
	ping := wire.AppendPing(nil)

	tick := time.NewTicker(a.cfg.StatsInterval)
	defer tick.Stop()
	var st wire.Stats
	var ctl, spoolBuf []byte
	sendStats := func() error {
		a.collectStats(&st)
		ctl = wire.AppendStats(ctl[:0], &st)
		return t.write(conn, ctl)
	}
	for {
		if b := a.q.at(cursor + 1); b != nil {
			if b.nIfaces > declared {
				ifs := a.interfaces()
				for ; declared < b.nIfaces; declared++ {
					ctl = wire.AppendIface(ctl[:0], uint32(declared), &ifs[declared])
					if err := t.write(conn, ctl); err != nil {
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
			// Raise sentMax and the sent counter first: the collector may
			// acknowledge the batch as soon as its last byte is in the
			// kernel, before Write returns. beginWrite keeps that ack from
			// pooling b until endWrite (a source would refill the buffer
			// under the write); use only seq after the write all the same.
			seq := b.seq
			sentMax.Store(seq)
			if seq > a.firstSent.Load() {
				a.firstSent.Store(seq)
				a.sent.Add(b.packets)
				a.batchesSent.Add(1)
				a.q.markSent(seq)
			} else {
				a.batchesResent.Add(1)
			}
			a.q.beginWrite(b)
			err := t.write(conn, frame)
			a.q.endWrite()
			if err != nil {
				return err
			}
			cursor = seq
			continue
		}
		select {
		case <-a.q.pushed:
		case <-tick.C:
			if err := sendStats(); err != nil {
				return err
			}
		case <-hb.C:
			if idle := time.Since(t.lastWrite); idle < a.cfg.Heartbeat {
				hb.Reset(a.cfg.Heartbeat - idle)
				continue
			}
			if err := t.write(conn, ping); err != nil {
				return err
			}
			hb.Reset(a.cfg.Heartbeat)
		case err := <-readErr:
			return err
		case <-ctx.Done():
			// Goodbye: final counters, then half-close (over TLS: a
			// close_notify) and wait briefly for the collector to finish,
			// so it sees a clean end of stream rather than a reset.
			err := sendStats()
			if cw, ok := conn.Conn.(interface{ CloseWrite() error }); ok && err == nil {
				cw.CloseWrite()
				select {
				case <-readErr:
				case <-time.After(2 * time.Second):
				}
			}
			return nil
		}
	}
}

// write writes b with a deadline, as the sender goroutine.
func (t *tcpSender) write(conn net.Conn, b []byte) error {
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := conn.Write(b)
	t.lastWrite = time.Now()
	return err
}

// readAcks reads the collector's frames until the connection ends.
// An ack beyond what was sent on this connection is a protocol error:
// it would release a batch still being written.
//
// It also watches the collector's liveness: nothing at all from it (no
// ack, no heartbeat) for PeerTimeout ends the connection.
func (t *tcpSender) readAcks(conn net.Conn, sentMax *atomic.Uint64) error {
	a := t.a
	lr := &liveness.Reader{Conn: conn, Timeout: a.cfg.PeerTimeout}
	fr := wire.NewFrameReader(bufio.NewReaderSize(lr, 4096), wire.Limits{})
	for {
		h, p, err := fr.Next()
		if err != nil {
			if err == io.EOF {
				return errors.New("collector closed the connection")
			}
			if errors.Is(err, liveness.ErrPeerTimeout) {
				return fmt.Errorf("collector silent, no ack or heartbeat for %s (stopped, or the network is cut): %w", a.cfg.PeerTimeout, err)
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
