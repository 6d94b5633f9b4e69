package console

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// Defaults for the zero fields of Config.
const (
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxSessions = 1024
	DefaultMaxPackets  = 10000 // the most lines GET /api/packets gives
	DefaultPackets     = 100   // its count without one
)

// Config configures a Handler.
type Config struct {
	// Dir is the output root the console reads, when Source is nil.
	Dir string
	// Source, if set, is what the console reads instead of Dir (a
	// federated console: NewFederated).
	Source Source
	// Status, if set, is the process's status (a collector's or
	// writer's agents, metrics.Status), called once per GET /api/agents;
	// it must be safe for concurrent use. nil: the agents are those of
	// the root only.
	Status func() any
	// Token, if set, is what the login form takes for a session. A
	// request with a client certificate the front door verified
	// (queryhttp.ClientOf) needs none. With no Token, a front door that
	// asks for no client certificate of the request (plain HTTP, TLS
	// without client CAs) admits it: the query listener's rule.
	Token string
	// SessionTTL is a session's life from its login; 0 means
	// DefaultSessionTTL.
	SessionTTL time.Duration
	// MaxSessions bounds the sessions held; a login beyond them, when
	// none has expired, is refused. 0 means DefaultMaxSessions.
	MaxSessions int
	// MaxQueries bounds the API requests that read the root at once
	// (agents, flows, packets, downloads); more are answered 503. 0
	// means queryhttp.DefaultMaxQueries.
	MaxQueries int
	Logger     *slog.Logger // nil: slog.Default()
}

// Validate reports the first unusable setting.
func (c *Config) Validate() error {
	switch {
	case c.Dir == "" && c.Source == nil:
		return fmt.Errorf("%w: no output root and no source", ErrConfig)
	case c.Dir != "" && c.Source != nil:
		return fmt.Errorf("%w: an output root and a source: one or the other", ErrConfig)
	case c.SessionTTL < 0:
		return fmt.Errorf("%w: session life %s is negative", ErrConfig, c.SessionTTL)
	case c.MaxQueries < 0:
		return fmt.Errorf("%w: max queries %d is negative", ErrConfig, c.MaxQueries)
	case c.MaxSessions < 0:
		return fmt.Errorf("%w: max sessions %d is negative", ErrConfig, c.MaxSessions)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.SessionTTL == 0 {
		c.SessionTTL = DefaultSessionTTL
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.MaxQueries == 0 {
		c.MaxQueries = queryhttp.DefaultMaxQueries
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
