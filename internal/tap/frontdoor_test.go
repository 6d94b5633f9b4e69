package tap

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

// runTap runs a Tap of cfg with one listener on 127.0.0.1 until the
// test ends.
func runTap(t *testing.T, cfg Config) *Tap {
	t.Helper()
	return runTapOn(t, cfg, "127.0.0.1:0")
}

// runTapOn runs a Tap of cfg with one listener on addr until the test
// ends.
func runTapOn(t *testing.T, cfg Config, addr string) *Tap {
	t.Helper()
	cfg.Listen = []Listener{{Addr: addr}}
	tp, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tp.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return tp
}

// TestTapRefusalLogLimited: refused tap clients are logged at most once
// per interval, not once each.
func TestTapRefusalLogLimited(t *testing.T) {
	var log testutil.Buffer
	tp := runTap(t, Config{Token: "0123456789abcdef", Logger: slog.New(slog.NewTextHandler(&log, nil))})
	addr := tp.Addrs()[0]
	const n = 30
	for range n {
		c := testutil.DialFrom(t, "127.0.0.1", addr)
		if c == nil {
			t.Fatal("reset")
		}
		c.Write([]byte("PCAPSYNC-TAP/1 token=wrong\n"))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 256)
		c.Read(b)
		c.Close()
	}
	testutil.EventuallyTrue(t, 5*time.Second, "all refused", func() bool { return tp.Counters.Rejected.Load() == n })
	if lines := strings.Count(log.String(), "tap client refused"); lines < 1 || lines > 3 {
		t.Errorf("%d log lines for %d refusals, want one per second:\n%s", lines, n, log.String())
	}
}
