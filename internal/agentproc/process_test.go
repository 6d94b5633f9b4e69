package agentproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/fielderr"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// base is a Config of an agent replaying a file to collector.
func base(t *testing.T, collector string) Config {
	t.Helper()
	path := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 100, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	return Config{Agent: agent.Config{Name: "p1", Collectors: []string{collector}, ReadFile: path, Insecure: true,
		ShutdownTimeout: 100 * time.Millisecond, DialTimeout: 500 * time.Millisecond}, Logger: quiet()}
}

func keys(err error) []string {
	var fe *fielderr.Error
	if !errors.As(err, &fe) {
		return nil
	}
	return fe.Keys()
}

// TestValidate: the agent's rules and the metrics listener's, each
// error matching ErrConfig and naming its field (not a flag).
func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*Config)
		key  string // "" for a valid Config
	}{
		{"valid", func(*Config) {}, ""},
		{"agent", func(c *Config) { c.Agent.SnapLen = -1 }, "agent.SnapLen"},
		{"metrics", func(c *Config) { c.Metrics.Pprof = true }, "metrics.Pprof"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base(t, "127.0.0.1:1")
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.key == "" && err != nil:
				t.Fatalf("Validate() = %v", err)
			case tt.key == "":
			case !errors.Is(err, ErrConfig) || !slices.Contains(keys(err), tt.key):
				t.Fatalf("Validate() = %v (fields %q), want ErrConfig naming %s", err, keys(err), tt.key)
			case strings.Contains(err.Error(), "--"):
				t.Errorf("Validate() = %v names a flag", err)
			}
			if _, nerr := New(c); tt.key != "" && !errors.Is(nerr, ErrConfig) {
				t.Errorf("New() = %v, want Validate's error", nerr)
			}
		})
	}
}

// TestNewFails: a taken metrics port and a user New cannot switch to
// fail New, which then leaves the metrics port free again.
func TestNewFails(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := base(t, "127.0.0.1:1")
	c.Metrics.Addr = taken.Addr().String()
	if _, err := New(c); err == nil || errors.Is(err, ErrConfig) {
		t.Errorf("New with a taken metrics port = %v, want a listen error", err)
	}

	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := free.Addr().String()
	free.Close()
	c.Metrics.Addr, c.User = addr, "pcapsync-no-such-user"
	_, err = New(c)
	if err == nil || !slices.Contains(keys(err), "agentproc.User") {
		t.Fatalf("New with user %q = %v (fields %q), want an error naming User", c.User, err, keys(err))
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the metrics port stays bound after New failed: %v", err)
	}
	ln.Close()
}

// TestRun: Run serves the agent's metrics while the agent runs, and
// returns the agent's summary once its context ends.
func TestRun(t *testing.T) {
	coll, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	go func() {
		for {
			c, err := coll.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	c := base(t, coll.Addr().String())
	c.Metrics = metrics.Config{Addr: "127.0.0.1:0"}
	p, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		sum agent.Summary
		err error
	}
	done := make(chan result, 1)
	go func() { s, err := p.Run(ctx); done <- result{s, err} }()
	testutil.Eventually(t, 10*time.Second, func() error {
		resp, err := http.Get("http://" + p.MetricsAddr() + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !strings.Contains(string(body), "pcapsync_agent_unacknowledged_packets 100") {
			return fmt.Errorf("/metrics holds no unacknowledged_packets 100 yet")
		}
		return nil
	})
	cancel()
	select {
	case r := <-done:
		if r.err != nil || r.sum.Read != 100 || r.sum.Acked != 0 {
			t.Errorf("Run() = %+v, %v; want 100 packets read, none acknowledged", r.sum, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := http.Get("http://" + p.MetricsAddr() + "/metrics"); err == nil {
		t.Error("the metrics listener still serves after Run returned")
	}
}
