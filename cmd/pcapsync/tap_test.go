package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/serve"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/tap"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// TestTapFlags: bad tap flags are usage errors that name the flag.
func TestTapFlags(t *testing.T) {
	coll := []string{"collector", "--dir", t.TempDir(), "--insecure", "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(coll, "--tap", "7740"), `for "--tap" flag`},
		{append(coll, "--tap", "127.0.0.1:0=no/such"), "agent"},
		{append(coll, "--tap-queue", "1M"), "--tap-queue needs --tap"},
		{append(coll, "--tap", "127.0.0.1:0", "--tap-queue", "1K"), "queue size 1024 out of range 64KiB..1GiB (--tap-queue)"},
		{[]string{"tail", "--collector-admin", "127.0.0.1:1", "--agent", "a", "--insecure", "--tls-ca", "ca.pem"}, "exclude each other"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errOut)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// startTapCollector runs a real collector (serve) on loopback with a
// tap until the test ends: TLS with p's collector certificate
// (127.0.0.1, pkitest.ServerName), or plain when p is nil.
func startTapCollector(t *testing.T, p *pkitest.PKI) *serve.Service {
	t.Helper()
	cfg := serve.Config{
		Collector: collector.Config{Store: store.Config{Dir: t.TempDir()}, Insecure: p == nil},
		Listen:    "127.0.0.1:0",
		Tap:       tap.Config{Listen: []tap.Listener{{Addr: "127.0.0.1:0"}}},
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if p != nil {
		cfg.TLSCertFile, cfg.TLSKeyFile = p.ServerCert, p.ServerKey
	}
	svc, err := serve.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	runUntilEnd(t, "collector", svc.Run)
	return svc
}

// TestTail: tail --tap of a real collector takes the filter as its
// trailing words, stops after -c packets (whole, the stream a valid
// pcapng), and without --agent streams every agent; it refuses what it
// cannot do with exit 2.
func TestTail(t *testing.T) {
	p := pkitest.New(t)
	svc := startTapCollector(t, p)
	tapAddr := svc.Tap().Addrs()[0]
	src := filepath.Join(t.TempDir(), "src.pcap")
	if err := gen.WriteFile(src, gen.FileConfig{Count: 50, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	// The plain client of the loopback tap of a TLS collector, no
	// --agent, the filter as words: IP ids 47 to 49 of each agent (gen
	// numbers them 0 to 49), 6 packets.
	var out testutil.Buffer
	done := make(chan error, 1)
	go func() {
		var errOut bytes.Buffer
		done <- run(context.Background(), []string{"tail", "--tap", tapAddr, "--insecure", "-c", "6", "ip[4:2]", ">=", "47"}, &out, &errOut)
	}()
	testutil.EventuallyTrue(t, 10*time.Second, "the tail connected", func() bool { return svc.Tap().Counters.Connected.Load() == 1 })
	for _, name := range []string{"web1", "web2"} {
		cert, key := p.Issue(t, p.CA, "agent-"+name, pki.Leaf{CommonName: name, Client: true})
		agentArgs := []string{"agent", "--collector", svc.Addr().String(), "--name", name, "--read", src,
			"--tls-ca", p.CAFile, "--tls-server-name", pkitest.ServerName, "--tls-cert", cert, "--tls-key", key}
		var ao, ae bytes.Buffer
		if err := run(context.Background(), agentArgs, &ao, &ae); err != nil {
			t.Fatalf("agent %s: %v (%s)", name, err, ae.String())
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("tail: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("tail -c 6 did not stop after 6 packets")
	}
	r, err := pcapfile.NewReader(strings.NewReader(out.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	seqs := map[string][]uint64{} // by agent
	for {
		p, err := r.ReadPacket()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("the stream: %v", err)
			}
			break
		}
		_, seq, ok, err := gen.Parse(p.Data, r.Interfaces()[p.Interface].LinkType)
		if !ok || err != nil {
			t.Fatalf("packet not generated: %v", err)
		}
		agent, _, _ := strings.Cut(r.Interfaces()[p.Interface].Name, ":")
		seqs[agent] = append(seqs[agent], seq)
	}
	if got := fmt.Sprint(seqs); got != "map[web1:[47 48 49] web2:[47 48 49]]" {
		t.Errorf("packets by agent %s, want 47 to 49 of web1 and web2", got)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tail", "--tap", tapAddr, "--insecure", "--filter", "udp", "tcp"}, "either with --filter or as arguments"},
		{[]string{"tail", "--tap", tapAddr, "--insecure", "-c", "-1"}, "-c -1"},
		{[]string{"tail", "--redis", "redis://127.0.0.1:1/0"}, "tail --redis needs --agent"},
		{[]string{"tail", "--tap", tapAddr, "--insecure", "--until-idle", "1s"}, "--until-idle works with --redis only"},
	} {
		var so, se bytes.Buffer
		err := run(context.Background(), tc.args, &so, &se)
		if exitCode(err) != 2 || !strings.Contains(fmt.Sprint(err), tc.want) {
			t.Errorf("%q: %v, want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestTailTLSHint: a tail whose TLS handshake fails says what to give:
// --tls-ca when the collector's certificate is not trusted,
// --tls-server-name when it does not name the address, --insecure when
// the tap answered without TLS.
func TestTailTLSHint(t *testing.T) {
	p := pkitest.New(t)
	tlsTap := startTapCollector(t, p).Tap().Addrs()[0]
	_, port, _ := net.SplitHostPort(tlsTap)
	plainTap := startTapCollector(t, nil).Tap().Addrs()[0]
	ca := p.CAFile
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--tap", tlsTap}, []string{"x509", "give --tls-ca FILE", "or --insecure"}},
		{[]string{"--tap", "localhost:" + port, "--tls-ca", ca}, []string{"localhost", "give --tls-server-name"}},
		{[]string{"--tap", plainTap, "--tls-ca", ca}, []string{"the listener answered without TLS: give --insecure"}},
	} {
		var so, se bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := run(ctx, append([]string{"tail", "-c", "1"}, tc.args...), &so, &se)
		cancel()
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %v, want %q in the error", tc.args, err, w)
			}
		}
	}
	var so, se bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"query", "--from", "127.0.0.1:1", "-w", "-"}, &so, &se)
	if err == nil || strings.Contains(err.Error(), "give") {
		t.Errorf("a refused connection: %v, want no TLS hint", err)
	}
}
