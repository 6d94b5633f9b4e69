package metrics

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/frontdoor"
	"github.com/pcapsync/pcapsync/internal/testutil/doortest"
)

// TestFrontDoor runs the front door suite on a metrics listener.
func TestFrontDoor(t *testing.T) {
	doortest.Run(t, doortest.Adapter{
		Start: func(t *testing.T, o doortest.Options) doortest.Door {
			srv, err := Listen(Config{Addr: o.Addr, MaxConns: o.MaxConns}) // per source: a quarter of it, as the suite's
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				done <- srv.Run(ctx, srv.Handler(prometheus.NewRegistry(), nil), slog.New(slog.DiscardHandler))
			}()
			t.Cleanup(func() { cancel(); <-done })
			c := srv.Conns()
			return doortest.Door{Addr: srv.Addr(), Open: c.Open.Load,
				Over: func() uint64 { return c.OverLimit.Load() + c.OverSource.Load() }}
		},
		Speak: func(t *testing.T, c net.Conn, tc *tls.Config, token string) error {
			return doortest.SpeakHTTP(c, tc, "/metrics", "")
		},
		NoTLS:   "the metrics listener has no TLS (docs/metrics.md, Security)",
		NoToken: "the metrics listener has no authentication (docs/metrics.md, Security)",
		// Not settable in metrics.Config: the HTTP server's header timeout.
		FixedHandshakeTimeout: frontdoor.DefaultHeaderTimeout,
	})
}
