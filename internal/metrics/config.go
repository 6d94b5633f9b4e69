package metrics

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/frontdoor"
)

// DefaultMaxConns is the connection cap of a metrics listener (Config.MaxConns).
const DefaultMaxConns = 64

// The metrics port of each command: what the configurations under
// deploy/ set and the documentation shows. No listener is opened
// without --metrics; these are the ports to give it, one per command, so
// that an agent, a collector and a writer on one host do not collide.
const (
	DefaultAgentPort     = 9733
	DefaultCollectorPort = 9734
	DefaultWriterPort    = 9735
)

// DefaultStatusAddr is the address "pcapsync status" asks when given
// none: a collector's metrics listener on this host, at its
// DefaultCollectorPort.
var DefaultStatusAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(DefaultCollectorPort))

// Config configures a metrics listener (Listen) and, for a collector,
// the label cap of NewCollector. The zero value means no listener.
type Config struct {
	// Addr is the HOST:PORT the metrics are served on; "" for none.
	Addr string
	// Pprof also serves Go's profiler at /debug/pprof/ (no
	// authentication). It needs Addr.
	Pprof bool
	// MaxConns bounds the connections open at once, and a quarter of it
	// those of one address (frontdoor.Listener): more are closed at once
	// and counted. 0 means DefaultMaxConns.
	MaxConns int
	// MaxAgents caps the "agent" label values of a collector's metrics
	// (see NewCollector): 0 means DefaultMaxAgents, -1 no cap.
	MaxAgents int
}

// Validate reports the first unusable setting, naming its field
// (fielderr). Its errors match ErrConfig.
func (c *Config) Validate() error {
	switch {
	case c.Pprof && c.Addr == "":
		return configError{fielderr.Errorf("metrics: the profiler ({metrics.Pprof}) needs a listener ({metrics.Addr} HOST:PORT), it is served there")}
	case c.MaxConns < 0:
		return configError{fielderr.Errorf("metrics: max conns %d is negative ({metrics.MaxConns})", c.MaxConns)}
	case c.MaxAgents < -1:
		return configError{fielderr.Errorf("metrics: max agents %d: want a positive number, or -1 for no cap ({metrics.MaxAgents})", c.MaxAgents)}
	}
	return nil
}

// configError is an error of Validate: its text says what is wrong
// (ErrConfig's would add nothing), and it matches ErrConfig.
type configError struct{ err error }

func (e configError) Error() string { return e.err.Error() }

func (e configError) Unwrap() error { return e.err }

func (configError) Is(target error) bool { return target == ErrConfig }

// Server is a metrics listener. Listen opens it, Run serves it.
type Server struct {
	cfg Config
	ln  *frontdoor.Listener
}

// Listen validates cfg and opens its listener (cfg.Addr must be set),
// so that a port already taken fails the start before anything runs.
// Run serves it; Close closes it unserved.
func Listen(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ln, err := frontdoor.Listen(cfg.Addr, frontdoor.Config{Name: "metrics", MaxConns: cmp.Or(cfg.MaxConns, DefaultMaxConns)})
	if err != nil {
		return nil, fmt.Errorf("metrics listener: %w", err)
	}
	return &Server{cfg: cfg, ln: ln}, nil
}

// Conns returns the counters of the listener's connections.
func (s *Server) Conns() *frontdoor.Counters { return &s.ln.Counters }

// Addr returns the listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Handler returns the handler Run should serve for reg: /metrics, the
// status page if status is not nil, the profiler if Config.Pprof.
func (s *Server) Handler(reg *prometheus.Registry, status http.Handler) http.Handler {
	return Handler(reg, Options{Status: status, Pprof: s.cfg.Pprof})
}

// Run serves h until ctx ends, then shuts the server down (see Serve),
// logging to log. A failure of the listener is logged and returned.
func (s *Server) Run(ctx context.Context, h http.Handler, log *slog.Logger) error {
	log.Info("metrics listening", "addr", s.Addr(), "pprof", s.cfg.Pprof)
	err := Serve(ctx, s.ln, h, log)
	if err != nil {
		log.Error("metrics listener failed", "err", err)
	}
	return err
}

// Close closes a listener that Run never served.
func (s *Server) Close() error { return s.ln.Close() }
