package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/metrics"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// collectorAddrs are the addresses a collector started by startCollector
// listens on.
type collectorAddrs struct {
	agents, metrics string
	query           string // "" without --query-listen
}

// startCollector runs "pcapsync collector" in-process on loopback, with
// --metrics metricsAddr, until the test ends: with the security flags
// given, else --insecure.
func startCollector(t *testing.T, metricsAddr string, security ...string) collectorAddrs {
	t.Helper()
	if security == nil {
		security = []string{"--insecure"}
	}
	stderr, done := runBackground(t, append([]string{"collector", "--listen", "127.0.0.1:0", "--dir", t.TempDir(),
		"--metrics", metricsAddr, "--shutdown-timeout", "100ms"}, security...)...)
	listening := regexp.MustCompile(`msg="collector listening" addr=(\S+).*`)
	queryListening := regexp.MustCompile(` query=(\S+)`)
	metricsListening := regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)
	var a collectorAddrs
	testutil.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the collector stopped: %v\n%s", err, stderr.String())
		default:
		}
		out := stderr.String()
		m, mm := listening.FindStringSubmatch(out), metricsListening.FindStringSubmatch(out)
		if m == nil || mm == nil {
			return errors.New("the collector's listeners are not up yet")
		}
		a = collectorAddrs{agents: m[1], metrics: mm[1]}
		if q := queryListening.FindStringSubmatch(m[0]); q != nil {
			a.query = q[1]
		}
		return nil
	})
	return a
}

// runStatusCmd runs pcapsync status with args and returns its output.
func runStatusCmd(args ...string) (string, error) {
	var out bytes.Buffer
	err := run(context.Background(), append([]string{"status"}, args...), &out, io.Discard)
	return out.String(), err
}

// shippedConfig writes deploy/NAME.conf with its metrics line set to
// addr, and the lines extra after it, into a file of t.
func shippedConfig(t *testing.T, name, addr string, extra ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", name+".conf"))
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^metrics = .*$`)
	if !re.Match(b) {
		t.Fatalf("deploy/%s.conf has no metrics line", name)
	}
	b = re.ReplaceAll(b, []byte("metrics = "+addr))
	b = append(b, strings.Join(extra, "\n")+"\n"...)
	p := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestStatusConfig: status --config asks the metrics address of a
// collector's, writer's or agent's configuration file, skipping their
// other settings, and still refuses a name that is no command's.
func TestStatusConfig(t *testing.T) {
	a := startCollector(t, "127.0.0.1:0")
	for _, tc := range []struct {
		file  string
		extra []string
		want  string // in the error; "" for success
	}{
		{"collector", nil, ""},
		{"writer", nil, ""},
		{"agent", nil, ""},
		{"collector", []string{"snaplen = 1500", "json"}, ""}, // an agent's setting; status's own
		{"collector", []string{"snaplenn = 1500"}, `unknown setting "snaplenn": pcapsync status has no --snaplenn`},
		{"collector", []string{"config = x"}, "cannot name another one"},
	} {
		conf := shippedConfig(t, tc.file, a.metrics, tc.extra...)
		out, err := runStatusCmd("--config", conf)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("status --config %s.conf %q: %v", tc.file, tc.extra, err)
		case tc.want == "" && !strings.Contains(out, "0 agents, 0 connected") && !strings.Contains(out, `"agents": []`):
			t.Errorf("status --config %s.conf %q printed %q, not the collector's status", tc.file, tc.extra, out)
		case tc.want != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("status --config %s.conf %q: err = %v, want a usage error with %q", tc.file, tc.extra, err, tc.want)
		}
	}
	// The command line wins over the file.
	conf := shippedConfig(t, "collector", "127.0.0.1:1")
	if _, err := runStatusCmd("--config", conf, "--metrics", a.metrics); err != nil {
		t.Errorf("--metrics beside --config: %v", err)
	}
}

// TestStatusErrors: status says which address it asked when nothing
// answers there, and that a collector's agents' port, plain or TLS, is
// not the metrics listener (instead of "EOF" or a malformed status
// code).
func TestStatusErrors(t *testing.T) {
	a := startCollector(t, "127.0.0.1:0")
	p := pkitest.New(t)
	tls := startCollector(t, "127.0.0.1:0", "--tls-cert", p.ServerCert, "--tls-key", p.ServerKey, "--tls-client-ca", p.CAFile)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{a.agents, []string{a.agents + " did not answer HTTP", "is it the agents' port", "default " + metrics.DefaultStatusAddr}},
		{tls.agents, []string{tls.agents + " did not answer HTTP", "is it the agents' port"}},
		{closed, []string{"nothing answers at " + closed, "give status --metrics HOST:PORT or --config FILE"}},
	} {
		_, err := runStatusCmd("--metrics", tc.addr, "--timeout", "10s")
		if err == nil {
			t.Errorf("status --metrics %s: no error", tc.addr)
			continue
		}
		if errors.Is(err, errUsage) {
			t.Errorf("status --metrics %s: %v is a usage error", tc.addr, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("status --metrics %s: %v\nlacks %q", tc.addr, err, w)
			}
		}
	}
}

// TestStatusDefault: status without --metrics asks the collector's
// default metrics address on this host, and names it when nothing
// answers there.
func TestStatusDefault(t *testing.T) {
	addr := metrics.DefaultStatusAddr
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("%s is taken on this host (%v): cannot run a collector there", addr, err)
	}
	ln.Close()
	if _, err := runStatusCmd(); err == nil || !strings.Contains(err.Error(), "nothing answers at "+addr) {
		t.Errorf("status with nothing at %s: %v, want an error naming the address", addr, err)
	}
	startCollector(t, addr)
	out, err := runStatusCmd()
	if err != nil || !strings.Contains(out, "0 agents, 0 connected") {
		t.Errorf("status with a collector at %s: %v\n%s", addr, err, out)
	}
}
