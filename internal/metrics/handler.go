package metrics

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
)

// Options say what Handler serves besides /metrics.
type Options struct {
	Status http.Handler // at /status, if set
	Pprof  bool         // net/http/pprof at /debug/pprof/
}

// Handler serves reg at /metrics, and what opts adds, on its own mux
// (never http.DefaultServeMux). It has no authentication.
func Handler(reg *prometheus.Registry, opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, ErrorHandling: promhttp.ContinueOnError}))
	if opts.Status != nil {
		mux.Handle("GET /status", opts.Status)
	}
	if opts.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Serve serves h on ln until ctx ends, then shuts the server down
// (waiting up to a second for requests in flight) and returns nil. A
// client has frontdoor.DefaultHeaderTimeout for its request's headers
// and a kept-alive connection is closed after
// frontdoor.DefaultIdleTimeout without a request.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := frontdoor.HTTPServer(h, frontdoor.HTTPConfig{})
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
