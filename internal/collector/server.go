package collector

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/liveness"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// commitBytes is how much a connection writes (decompressed records)
// before it acknowledges even though more frames are already waiting in
// its read buffer. It bounds a compressed file's gzip member or zstd
// flush.
const commitBytes = 8 << 20

// writeTimeout bounds one write of an acknowledgement: an agent that
// stops reading is cut off, never waited for.
const writeTimeout = 10 * time.Second

// Why a connection waiting for read memory stops waiting.
var (
	errShutdown = errors.New("collector shutting down")
	errReplaced = errors.New("connection replaced by a newer one")
)

// Server is the TCP transport of a Core, with TLS if configured. Each
// connection has one goroutine that shakes hands (TLS, then the Hello:
// token, identity), reads frames, drives its session and writes
// acknowledgements, plus a heartbeat timer once the session runs (its
// function runs, on a goroutine of its own, only when it fires); a slow
// or broken agent blocks only its own goroutine. Frames are read
// into buffers reserved from the Core's read memory (Config.ReadMemory)
// once their header arrived and given back once handled; a connection
// between frames holds none.
type Server struct {
	core *Core
	log  *slog.Logger

	shutting atomic.Bool
	door1    atomic.Pointer[frontdoor.Listener] // Serve's
	refusals frontdoor.RateLog                  // unauthenticated clients refused: one WARN per interval and reason
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

// NewServer returns a TCP transport for core.
func NewServer(core *Core) *Server {
	return &Server{core: core, log: core.log, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on ln (through a front door, see Core.Door,
// unless it is one) until ctx ends; then it stops reading,
// lets every connection commit and acknowledge what it wrote, waits for
// them (bounded by ShutdownTimeout) and returns. The caller closes the
// Core afterwards. Without TLS and without Insecure in the Config it
// returns ErrInsecure at once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	cfg := &s.core.cfg
	switch {
	case cfg.TLS == nil && !cfg.Insecure:
		ln.Close()
		return ErrInsecure
	case cfg.TLS == nil:
		s.log.Warn("INSECURE: plain TCP, no TLS: captured packets cross the network in clear text and any host that reaches this port can write as any agent name")
	case cfg.TLS.ClientAuth != tls.RequireAndVerifyClientCert && cfg.Token == "":
		s.log.Warn("TLS without client authentication: any host that reaches this port can write as any agent name; add client certificates or a token")
	}
	door, ok := ln.(*frontdoor.Listener)
	if !ok {
		door = s.core.Door(ln)
	}
	s.door1.Store(door)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// Ends every wait for read memory at shutdown, as the read
	// deadlines end every read.
	reading, stopReading := context.WithCancelCause(context.Background())
	defer stopReading(nil)
	var err error
	for {
		var conn net.Conn
		// Over a cap, a connection is closed here and counted; out of
		// descriptors or memory, Accept pauses until connections end.
		conn, err = door.Accept()
		if err != nil {
			break
		}
		s.mu.Lock()
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handle(reading, conn)
	}
	s.shutting.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
	stopReading(errShutdown)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(s.core.cfg.ShutdownTimeout):
		s.log.Warn("shutdown: connections still busy, closing them")
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		<-done
	}
	if ctx.Err() != nil {
		return nil
	}
	return fmt.Errorf("accepting connections: %w", err)
}

// Door returns a front door on ln for the agents: Config.MaxConns and
// MaxConnsPerSource, the connections closed over them counted in
// Counters.OverLimit. Server.Serve makes one on a listener that is not.
func (c *Core) Door(ln net.Listener) *frontdoor.Listener {
	return frontdoor.New(ln, frontdoor.Config{Name: "agents", MaxConns: c.cfg.MaxConns, MaxPerSource: c.cfg.MaxConnsPerSource,
		Logger: c.log, OnOver: func() { c.Counters.OverLimit.Add(1) }})
}

// Door returns the front door Serve accepts through (its connection
// counters), nil before Serve.
func (s *Server) Door() *frontdoor.Listener { return s.door1.Load() }

// handle runs one connection; reading ends its waits for read memory.
func (s *Server) handle(reading context.Context, raw net.Conn) {
	ctx, cancel := context.WithCancelCause(reading)
	defer func() {
		cancel(nil)
		raw.Close()
		s.mu.Lock()
		delete(s.conns, raw)
		s.mu.Unlock()
		s.wg.Done()
	}()
	cfg := &s.core.cfg
	log := s.log.With("remote", raw.RemoteAddr().String())
	if tc, ok := frontdoor.TCPConn(raw); ok {
		tc.SetReadBuffer(4 << 20)
		if err := liveness.SetUserTimeout(tc, cfg.PeerTimeout); err != nil {
			log.Debug("TCP_USER_TIMEOUT not set", "err", err)
		}
	}
	// One deadline from accept covers the TLS handshake and the Hello
	// (a wait for its memory too).
	handshakeEnd := time.Now().Add(cfg.HandshakeTimeout)
	raw.SetDeadline(handshakeEnd)
	conn, peer, err := s.secure(raw)
	if err != nil {
		s.core.Counters.Rejected.Add(1)
		s.refusals.WarnKey(log, "tls "+err.Error(), "TLS handshake failed, connection rejected", "err", err)
		return
	}
	lr := &liveness.Reader{Conn: conn, Stop: &s.shutting} // Timeout 0: the handshake deadline holds
	// No read buffer: the reader reads a header, then the payload into
	// its reserved buffer, with the next header if it has arrived.
	fr := wire.NewSharedFrameReader(lr, s.core.limits(), s.core.mem)
	defer fr.Close()

	if cfg.TLS == nil {
		if b, _ := fr.Peek(1); len(b) == 1 && b[0] == frontdoor.TLSStart {
			s.core.Counters.Rejected.Add(1)
			err := errors.New("the agent speaks TLS, this collector plain TCP (--insecure): give both the same setting")
			s.refusals.WarnKey(log, "hello "+err.Error(), "handshake failed, closing connection", "err", err)
			s.reject(conn, err)
			return
		}
	}
	hctx, hcancel := context.WithDeadline(ctx, handshakeEnd)
	h, p, err := fr.NextContext(hctx)
	hcancel()
	if err == nil && h.Type != wire.TypeHello {
		err = fmt.Errorf("first frame is %s, want hello: %w", h.Type, wire.ErrUnknownType)
	}
	var hello wire.Hello
	if err == nil {
		hello, err = wire.ParseHello(p)
	}
	if err != nil {
		s.core.Counters.Rejected.Add(1)
		s.refusals.WarnKey(log, "hello "+err.Error(), "handshake failed, closing connection", "err", err)
		s.reject(conn, err)
		return
	}
	// Authentication before begin: a refused agent leaves no trace on
	// disk (no directory, no file, no instance mark).
	if err := s.core.authenticate(&hello, peer); err != nil {
		s.core.Counters.Rejected.Add(1)
		s.refusals.WarnKey(log, "auth "+err.Error(), "handshake rejected", "agent", hello.Name, "err", err)
		s.reject(conn, err)
		return
	}
	transport := "tcp"
	if cfg.TLS != nil {
		transport = "tls"
	}
	fr.Release() // the hello is parsed: its buffer goes back before begin
	abort := func(cause error) { cancel(cause); raw.Close() }
	sess, welcome, err := s.core.begin(&hello, Peer{Addr: raw.RemoteAddr().String(), Transport: transport}, func() { abort(errReplaced) })
	if errors.Is(err, ErrBusy) {
		log.Warn("closing new connection; the agent will retry", "agent", hello.Name, "err", err)
		return
	}
	if err != nil {
		log.Warn("handshake rejected", "agent", hello.Name, "err", err)
		s.reject(conn, err)
		return
	}
	log = log.With("agent", hello.Name)
	aw := &ackWriter{conn: conn, abort: func() { abort(net.ErrClosed) }, seq: welcome.LastSeq}
	// A sink makes batches durable after serve handled them:
	// acknowledge as it does.
	sess.onAck = func(seq uint64) { aw.ack(seq, false) }
	aw.mu.Lock()
	err = aw.write(wire.AppendWelcome(nil, welcome))
	aw.mu.Unlock()
	if err != nil {
		log.Warn("sending welcome", "err", err)
		sess.end(false)
		return
	}
	// From here on a read fails only after PeerTimeout without a byte;
	// the shutdown's deadline (via Stop) still wins.
	if !s.shutting.Load() {
		raw.SetDeadline(time.Time{})
	}
	lr.Timeout = cfg.PeerTimeout
	attrs := []any{"host", hello.Host, "interfaces", len(hello.Interfaces), "resume_after_seq", welcome.LastSeq}
	if tc, ok := conn.(*tls.Conn); ok {
		attrs = append(attrs, "tls", tls.VersionName(tc.ConnectionState().Version))
	}
	if peer != nil {
		attrs = append(attrs, "cert_cn", peer.Subject.CommonName)
	}
	log.Info("agent connected", attrs...)
	stopHeartbeat := aw.heartbeat(cfg.Heartbeat)
	clean, err := s.serve(ctx, fr, sess, aw)
	stopHeartbeat()
	switch {
	case clean:
		log.Info("agent disconnected")
	case s.shutting.Load() && (isTimeout(err) || errors.Is(err, errShutdown)):
		log.Info("connection closed for shutdown")
	case sess.kicked.Load():
		log.Info("connection replaced by a newer one")
	case errors.Is(err, liveness.ErrPeerTimeout):
		s.core.Counters.PeerTimeouts.Add(1)
		log.Warn("agent silent: peer timeout, ending the session (its file stays open for the idle-close time)", "peer_timeout", cfg.PeerTimeout)
	case errors.Is(err, ErrSink):
		log.Error("sink error: nothing more acknowledged, connection dropped; the agent will resend", "err", err)
	case errors.Is(err, ErrStorage):
		// Checked before network errors: an errno such as ENOSPC also
		// satisfies net.Error.
		log.Error("storage error: nothing more acknowledged, connection dropped; the agent will resend", "err", err)
	case errors.Is(err, io.ErrUnexpectedEOF) || isNetErr(err):
		log.Warn("connection lost", "err", err)
	default:
		s.core.Counters.ProtocolErrors.Add(1)
		if errors.Is(err, wire.ErrTooLarge) {
			s.core.Counters.TooLarge.Add(1)
		}
		log.Warn("closing connection: protocol error", "err", err)
	}
	// Everything written is acknowledged (serve commits before it
	// returns): close the connection first, so that an agent waiting
	// for the end of its goodbye does not also wait for the file's
	// close and sync in End.
	conn.Close()
	sess.end(clean)
}

// secure runs the TLS handshake if TLS is configured and returns the
// connection to speak on and the agent's verified certificate, if the
// configuration requires one. A plain pcapsync agent is told in a plain
// Reject that this collector needs TLS.
func (s *Server) secure(raw net.Conn) (net.Conn, *x509.Certificate, error) {
	cfg := s.core.cfg.TLS
	if cfg == nil {
		return raw, nil, nil
	}
	tc := tls.Server(raw, cfg)
	if err := tc.Handshake(); err != nil {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) && rh.Conn != nil && rh.RecordHeader[0] == wire.Magic {
			err = errors.New("the agent speaks plain TCP, this collector requires TLS: give the agent --tls-ca (and a client certificate or token as required)")
			s.reject(rh.Conn, err)
		}
		return nil, nil, err
	}
	var peer *x509.Certificate
	if cfg.ClientAuth == tls.RequireAndVerifyClientCert {
		certs := tc.ConnectionState().PeerCertificates
		if len(certs) == 0 { // cannot happen after verification; refuse rather than trust
			return nil, nil, errors.New("no verified client certificate")
		}
		peer = certs[0]
	}
	return tc, peer, nil
}

// authenticate checks a Hello's token and, with client certificates,
// that the agent's name is its certificate's. The error is the reason the
// agent is told. Every transport calls it before begin.
func (c *Core) authenticate(h *wire.Hello, peer *x509.Certificate) error {
	if want := c.cfg.Token; want != "" && !frontdoor.TokenEqual(h.Token, want) {
		if h.Token == "" {
			return errors.New("token required: give the agent the collector's token file")
		}
		return errors.New("wrong token")
	}
	if peer != nil {
		if err := pki.CheckIdentity(peer, h.Name); err != nil {
			return err
		}
	}
	return nil
}

// ackWriter writes a session's acknowledgements; the connection
// goroutine and the heartbeat timer share it.
type ackWriter struct {
	conn    net.Conn // written to: TLS or plain
	abort   func()   // closes the TCP connection (and ends a wait for memory) when a heartbeat fails
	mu      sync.Mutex
	seq     uint64    // last acknowledged, or the welcome's last seq
	last    time.Time // of the last write
	stopped bool      // the heartbeat is stopped
	buf     [wire.HeaderSize + 8]byte
}

// write writes b; aw.mu must be held.
func (aw *ackWriter) write(b []byte) error {
	aw.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := aw.conn.Write(b)
	aw.last = time.Now()
	return err
}

// ack acknowledges every batch up to seq, unless that was the last ack
// sent and force is false. Acknowledgements never go back: an ingest
// collector's sink raises seq from another goroutine.
func (aw *ackWriter) ack(seq uint64, force bool) error {
	aw.mu.Lock()
	defer aw.mu.Unlock()
	seq = max(seq, aw.seq)
	if seq == aw.seq && !force {
		return nil
	}
	aw.seq = seq
	return aw.write(wire.AppendAck(aw.buf[:0], seq))
}

// heartbeat re-sends the last ack whenever nothing was written for
// every, until stop is called or a write fails (then the connection is
// closed, so that the connection goroutine stops too). It holds a timer,
// not a goroutine, between beats; after stop returns it writes nothing.
func (aw *ackWriter) heartbeat(every time.Duration) (stop func()) {
	var t *time.Timer // set under aw.mu: the first beat may come before AfterFunc returns
	aw.mu.Lock()
	defer aw.mu.Unlock()
	t = time.AfterFunc(every, func() {
		aw.mu.Lock()
		if aw.stopped {
			aw.mu.Unlock()
			return
		}
		idle := time.Since(aw.last)
		var err error
		if idle >= every {
			err = aw.write(wire.AppendAck(aw.buf[:0], aw.seq))
			idle = 0
		}
		t := t
		aw.mu.Unlock()
		if err != nil {
			aw.abort()
			return
		}
		t.Reset(every - idle)
	})
	return func() {
		aw.mu.Lock()
		aw.stopped = true
		aw.mu.Unlock()
		t.Stop()
	}
}

// serve runs a session until its connection ends (or ctx, while it
// waits for read memory). clean is true for an end of stream between
// frames.
func (s *Server) serve(ctx context.Context, fr *wire.FrameReader, sess *session, aw *ackWriter) (clean bool, err error) {
	uncommitted := 0
	commit := func(force bool) error {
		seq, err := sess.commit()
		if err != nil {
			return err
		}
		uncommitted = 0
		return aw.ack(seq, force)
	}
	for {
		h, p, err := fr.NextContext(ctx)
		if err != nil {
			// Whatever was written before the end is acknowledged, best
			// effort: after a protocol error too, the good batches are in.
			cerr := commit(false)
			if err == io.EOF {
				return cerr == nil, cerr
			}
			return false, err
		}
		dup := false
		switch h.Type {
		case wire.TypeBatch:
			dup, err = sess.batch(h.Flags, p)
			uncommitted = sess.uncommittedRaw
		case wire.TypeStats:
			err = sess.recordStats(p)
		case wire.TypeIface:
			err = sess.iface(p)
		case wire.TypePing:
			err = wire.ParsePing(p)
		case wire.TypeInfo:
			err = sess.info(p)
		default:
			err = fmt.Errorf("unexpected %s frame: %w", h.Type, wire.ErrUnknownType)
		}
		fr.Release() // handled: its memory goes back before the commit
		if err != nil {
			commit(false)
			return false, err
		}
		// Acknowledge when no further frame has begun to arrive (the
		// reader reads the next header with each payload).
		if fr.Buffered() < wire.HeaderSize || uncommitted >= commitBytes || dup {
			if err := commit(dup); err != nil {
				return false, err
			}
		}
	}
}

func (s *Server) reject(conn net.Conn, reason error) {
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	conn.Write(wire.AppendReject(nil, reason.Error()))
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func isNetErr(err error) bool {
	var ne net.Error
	var oe *net.OpError
	return errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, net.ErrClosed)
}
