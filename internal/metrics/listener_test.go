package metrics

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

// TestListenerConnCap: the metrics listener keeps at most MaxConns
// connections (a quarter, at least 4, per address) open; more are
// closed at once and counted, and a scrape within the cap is served.
func TestListenerConnCap(t *testing.T) {
	srv, err := Listen(Config{Addr: "127.0.0.1:0", MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- srv.Run(ctx, srv.Handler(prometheus.NewRegistry(), nil), slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range 5 {
		if c, err := net.Dial("tcp", srv.Addr()); err == nil { // the fifth may be reset before Dial returns
			held = append(held, c)
		}
	}
	testutil.EventuallyTrue(t, 5*time.Second, "4 open, 1 closed over the cap", func() bool {
		return srv.Conns().Open.Load() == 4 && srv.Conns().OverLimit.Load() == 1
	})
	held[0].Close()
	testutil.EventuallyTrue(t, 5*time.Second, "3 open", func() bool { return srv.Conns().Open.Load() == 3 })
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + srv.Addr() + "/metrics")
	if err != nil {
		t.Fatalf("a scrape within the cap: %v", err)
	}
	resp.Body.Close()
}
