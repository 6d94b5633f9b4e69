package frontdoor

import (
	"net/http"
	"time"
)

// Defaults of HTTPConfig's zero fields.
const (
	DefaultHeaderTimeout  = 10 * time.Second
	DefaultIdleTimeout    = time.Minute
	DefaultMaxHeaderBytes = 64 << 10
)

// HTTPConfig is the front door's part of an http.Server.
type HTTPConfig struct {
	// HeaderTimeout bounds reading a request's headers (from the
	// connection's start, or from the end of the previous answer). 0
	// means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// IdleTimeout closes a kept-alive connection without a request for
	// this long. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
}

// HTTPServer returns an http.Server serving h with c's deadlines and
// headers of at most DefaultMaxHeaderBytes; the caller sets the rest
// (ErrorLog, contexts) before serving.
func HTTPServer(h http.Handler, c HTTPConfig) *http.Server {
	if c.HeaderTimeout <= 0 {
		c.HeaderTimeout = DefaultHeaderTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: c.HeaderTimeout, IdleTimeout: c.IdleTimeout,
		MaxHeaderBytes: DefaultMaxHeaderBytes}
}

// CloseAfter makes the answer being written the last of its connection
// (Connection: close): a refused client keeps nothing open here. Call
// it before WriteHeader.
func CloseAfter(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
}
