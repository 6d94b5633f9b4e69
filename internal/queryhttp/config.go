package queryhttp

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pcapsync/pcapsync/internal/fielderr"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxQueries       = 4
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultWriteTimeout     = 30 * time.Second
	DefaultShutdownTimeout  = 5 * time.Second
	DefaultCompileTimeout   = 2 * time.Second
	// DefaultMaxConns is the connection cap of a Server on its own; a
	// collector derives its cap from RLIMIT_NOFILE (frontdoor.Budget),
	// at most this.
	DefaultMaxConns = 256
)

// QueryThreads is the query.Config.Threads of every query ParseQuery
// reads (GET /query's, the console's): 1, the query in the goroutine
// of its request, without read-ahead. The listener runs
// in a collector or writer, whose cores are the capture's; up to
// MaxQueries queries use as many cores at once; and a query on one core
// writes faster (hundreds of MB/s) than most clients take over the
// network. pcapsync query --dir on the host uses the cores instead.
const QueryThreads = 1

// MaxMaxQueries bounds Config.MaxQueries.
const MaxMaxQueries = 1024

// Config configures a Server. The zero value, but for Listen and Dir,
// means the defaults, plain HTTP and no token.
type Config struct {
	// Listen is the TCP address (HOST:PORT) New opens.
	Listen string
	// Dir is the output root queries read (query.Config.Dir); not
	// needed with Handler.
	Dir string
	// TLS, if set, is the collector's configuration (pki.ServerConfig):
	// the listener speaks TLS with its certificate, and with ClientCAs
	// a client certificate signed by them is required. A listener on a
	// loopback address admits plain HTTP clients too. nil: plain HTTP.
	TLS *tls.Config
	// Token, if set, must come with every request, as
	// "Authorization: Bearer TOKEN".
	Token string
	// MaxQueries bounds the queries running at once; more are answered
	// 503. 0 means DefaultMaxQueries.
	MaxQueries int
	// MaxConns bounds the connections open at once, TLS handshakes and
	// idle kept-alive ones included, and a quarter of it those of one
	// client address (frontdoor.Listener): more are closed at once and
	// counted. 0 means DefaultMaxConns.
	MaxConns int
	// ReorderMem is each query's query.Config.ReorderMem; 0 means
	// query.DefaultReorderMem.
	ReorderMem int64
	// HandshakeTimeout bounds a TLS handshake (and reading a plain
	// client's first byte).
	HandshakeTimeout time.Duration
	// WriteTimeout: a client that takes no bytes for this long is cut
	// off, its query ended.
	WriteTimeout time.Duration
	// ShutdownTimeout bounds how long Run waits for the queries it
	// cancelled to end their responses.
	ShutdownTimeout time.Duration
	// CompileTimeout bounds how long an admitted query waits for its
	// filter to compile, the compiles before it included (libpcap
	// compiles one at a time in the process): past it the query is
	// answered 503 and the compile, which cannot be interrupted, goes
	// on to its end unheeded.
	CompileTimeout time.Duration
	// Status, if set, is the process's status (the value its metrics
	// listener serves at GET /status: a collector's or writer's agents),
	// served as JSON at GET StatusPath to the clients the queries admit.
	// It is called once per request and must be safe for concurrent
	// use. nil: GET /status answers 404.
	Status func() any
	// Handler, if set, makes the Server the front door of another
	// read-only service (the console) instead of the queries: its caps,
	// TLS and plain-HTTP rules apply as to queries, then every request
	// goes to Handler, which authenticates it itself (ClientOf says
	// whether it came with a verified client certificate; Token is
	// Handler's to check).
	Handler http.Handler
	// Name names the listener in logs and errors; "" means "query".
	Name   string
	Logger *slog.Logger // nil: slog.Default()
}

// Validate reports the first unusable setting, naming its field
// (fielderr).
func (c *Config) Validate() error {
	switch {
	case c.Dir == "" && c.Handler == nil:
		return fielderr.Errorf("query listener: no output root ({queryhttp.Dir})")
	case c.MaxQueries < 0 || c.MaxQueries > MaxMaxQueries:
		return fielderr.Errorf("query listener: %d concurrent queries out of range 1..%d ({queryhttp.MaxQueries})", c.MaxQueries, MaxMaxQueries)
	case c.MaxConns < 0:
		return fielderr.Errorf("query listener: max conns %d is negative ({queryhttp.MaxConns})", c.MaxConns)
	case c.ReorderMem < 0:
		return fmt.Errorf("query listener: reorder memory %d is negative", c.ReorderMem)
	case c.HandshakeTimeout < 0 || c.WriteTimeout < 0 || c.ShutdownTimeout < 0 || c.CompileTimeout < 0:
		return errors.New("query listener: durations must not be negative")
	case len(c.Token) > wire.MaxTokenLen:
		return fmt.Errorf("query listener: token of %d bytes, at most %d", len(c.Token), wire.MaxTokenLen)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fielderr.Errorf("query listener %q: want HOST:PORT ({queryhttp.Listen}): %w", c.Listen, err)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.MaxQueries == 0 {
		c.MaxQueries = DefaultMaxQueries
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	if c.CompileTimeout == 0 {
		c.CompileTimeout = DefaultCompileTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "query"
	}
	return c
}
