package collector

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// commitBytes is how much a connection writes before it acknowledges
// even though more frames are already waiting in its read buffer.
const commitBytes = 8 << 20

// writeTimeout bounds one write of an acknowledgement: an agent that
// stops reading is cut off, never waited for.
const writeTimeout = 10 * time.Second

// Server is the TCP transport of a Core. Each connection has one
// goroutine that reads frames, drives its Session and writes
// acknowledgements; a slow or broken agent blocks only its own goroutine.
type Server struct {
	core *Core
	log  *slog.Logger

	shutting atomic.Bool
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

// NewServer returns a TCP transport for core.
func NewServer(core *Core) *Server {
	return &Server{core: core, log: core.log, conns: map[net.Conn]struct{}{}}
}

// Serve accepts connections on ln until ctx ends; then it stops reading,
// lets every connection commit and acknowledge what it wrote, waits for
// them (bounded by ShutdownTimeout) and returns. The caller closes the
// Core afterwards.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		var conn net.Conn
		conn, err = ln.Accept()
		if err != nil {
			break
		}
		s.mu.Lock()
		s.conns[conn] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go s.handle(conn)
	}
	s.shutting.Store(true)
	s.mu.Lock()
	for c := range s.conns {
		c.SetReadDeadline(time.Now())
	}
	s.mu.Unlock()
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

func (s *Server) handle(conn net.Conn) {
	defer func() {
		conn.Close()
		s.mu.Lock()
		delete(s.conns, conn)
		s.mu.Unlock()
		s.wg.Done()
	}()
	log := s.log.With("remote", conn.RemoteAddr().String())
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetReadBuffer(4 << 20)
	}
	conn.SetReadDeadline(time.Now().Add(s.core.cfg.HandshakeTimeout))
	br := bufio.NewReaderSize(conn, 256<<10)
	fr := wire.NewFrameReader(br, s.core.Limits())

	h, p, err := fr.Next()
	if err == nil && h.Type != wire.TypeHello {
		err = fmt.Errorf("first frame is %s, want hello: %w", h.Type, wire.ErrUnknownType)
	}
	var hello wire.Hello
	if err == nil {
		hello, err = wire.ParseHello(p)
	}
	if err != nil {
		s.core.Counters.Rejected.Add(1)
		log.Warn("handshake failed, closing connection", "err", err)
		s.reject(conn, err)
		return
	}
	sess, welcome, err := s.core.Begin(&hello, func() { conn.Close() })
	if err != nil {
		log.Warn("handshake rejected", "agent", hello.Name, "err", err)
		s.reject(conn, err)
		return
	}
	log = log.With("agent", hello.Name)
	conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := conn.Write(wire.AppendWelcome(nil, welcome)); err != nil {
		log.Warn("sending welcome", "err", err)
		sess.End(false)
		return
	}
	if !s.shutting.Load() {
		conn.SetReadDeadline(time.Time{})
	}
	log.Info("agent connected", "host", hello.Host, "interfaces", len(hello.Interfaces), "resume_after_seq", welcome.LastSeq)
	clean, err := s.serve(conn, br, fr, sess)
	switch {
	case clean:
		log.Info("agent disconnected")
	case s.shutting.Load() && isTimeout(err):
		log.Info("connection closed for shutdown")
	case sess.kicked.Load():
		log.Info("connection replaced by a newer one")
	case errors.Is(err, io.ErrUnexpectedEOF) || isNetErr(err):
		log.Warn("connection lost", "err", err)
	default:
		s.core.Counters.ProtocolErrors.Add(1)
		log.Warn("closing connection: protocol error", "err", err)
	}
	sess.End(clean)
}

// serve runs a session until its connection ends. clean is true for an
// end of stream between frames.
func (s *Server) serve(conn net.Conn, br *bufio.Reader, fr *wire.FrameReader, sess *Session) (clean bool, err error) {
	var ack [wire.HeaderSize + 8]byte
	var acked uint64
	uncommitted := 0
	commit := func(force bool) error {
		seq, err := sess.Commit()
		if err != nil {
			return err
		}
		uncommitted = 0
		if seq == acked && !force {
			return nil
		}
		acked = seq
		conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, err = conn.Write(wire.AppendAck(ack[:0], seq))
		return err
	}
	for {
		h, p, err := fr.Next()
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
			dup, err = sess.Batch(h.Flags, p)
			uncommitted += len(p)
		case wire.TypeStats:
			err = sess.Stats(p)
		case wire.TypeIface:
			err = sess.Iface(p)
		default:
			err = fmt.Errorf("unexpected %s frame: %w", h.Type, wire.ErrUnknownType)
		}
		if err != nil {
			commit(false)
			return false, err
		}
		if br.Buffered() < wire.HeaderSize || uncommitted >= commitBytes || dup {
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
