package queryhttp

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/query"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
)

// base is the first timestamp of the fixture's packets.
const base = int64(1_780_000_000_000_000_000)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// writeFixture writes n packets per agent (eth0 and eth1 alternating,
// 1 ms apart, the agents interleaved) through a real store below a new
// root, and returns the root.
func writeFixture(t *testing.T, n int, agents ...string) string {
	t.Helper()
	return writeFiles(t, 0, n, agents...)
}

// writeFiles is writeFixture with files of rotate bytes (0: the
// store's default).
func writeFiles(t *testing.T, rotate int64, n int, agents ...string) string {
	t.Helper()
	dir := t.TempDir()
	roottest.Write(t, dir, base, rotate, n, agents...)
	return dir
}

// localQuery runs cfg here, as pcapsync query --dir does.
func localQuery(t *testing.T, cfg query.Config) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := query.Run(context.Background(), cfg, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// pkiDir writes a CA, a collector certificate for 127.0.0.1 and a
// client certificate "viewer" into a new directory.
func pkiDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := pki.WriteSet(dir, pki.Set{Collector: []string{"127.0.0.1", "localhost"}, Agents: []string{"viewer"}}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// clientTLS returns a client's TLS configuration trusting the CA in
// caDir, with the certificate of name in certDir ("" none).
func clientTLS(t *testing.T, caDir, certDir, name string) *tls.Config {
	t.Helper()
	var cert, key string
	if name != "" {
		cert, key = pki.AgentFiles(name)
		cert, key = filepath.Join(certDir, cert), filepath.Join(certDir, key)
	}
	tc, err := pki.ClientConfig(filepath.Join(caDir, pki.CAFile), cert, key, "")
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// startServer starts a Server with cfg; it stops with the test.
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

// serverTLS returns the collector's TLS configuration from dir, client
// certificates required.
func serverTLS(t *testing.T, dir string) *tls.Config {
	t.Helper()
	tc, err := pki.ServerConfig(filepath.Join(dir, pki.CollectorFile), filepath.Join(dir, pki.CollectorKeyFile), filepath.Join(dir, pki.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	return tc
}
