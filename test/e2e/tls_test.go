//go:build linux

package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestMutualTLS runs the binaries as a user would set them up: "pcapsync
// gen certs", a collector requiring client certificates and a token,
// and replaying agents. The good agent delivers exactly once; an agent
// whose certificate names another agent, a plain agent and one without
// the token are stopped with the collector's reason and leave nothing.
func TestMutualTLS(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	work := t.TempDir()
	certs := genCerts(t, ctx, filepath.Join(work, "certs"), "127.0.0.1,localhost", "tls1,tls2")
	token := filepath.Join(work, "token")
	if err := os.WriteFile(token, []byte("e2e-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(work, "in.pcap")
	const count = 2000
	writeGenFile(t, in, genConfig(count, 61))

	dir := filepath.Join(work, "out")
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--tls-cert", filepath.Join(certs, "collector.pem"),
		"--tls-key", filepath.Join(certs, "collector-key.pem"), "--tls-client-ca", filepath.Join(certs, "ca.pem"), "--token-file", token,
		"--metrics", freeport.Addr(t))
	checkCertificateMetrics(t, metricsAddr(t, coll), certs, map[string]string{"collector.pem": "cert", "ca.pem": "ca"})
	agentTLS := func(cert string) []string {
		return []string{"--tls-ca", filepath.Join(certs, "ca.pem"), "--tls-cert", filepath.Join(certs, "agent-"+cert+".pem"),
			"--tls-key", filepath.Join(certs, "agent-"+cert+"-key.pem")}
	}

	good := startReplay(t, ctx, addr, "tls1", in, append(agentTLS("tls1"), "--token-file", token)...)
	s := finishReplay(t, good, count, 30*time.Second)
	expectNoReconnects(t, good, s)

	bad := []struct {
		name, agent string
		flags       []string
		says        string // in the agent's stderr, from the collector
	}{
		{"certificate of another agent", "tls1", append(agentTLS("tls2"), "--token-file", token), "does not match the client certificate"},
		{"no token", "tls2", agentTLS("tls2"), "token required"},
		{"plain TCP", "tls2", []string{"--insecure"}, "requires TLS"},
	}
	for _, b := range bad {
		p := startReplay(t, ctx, addr, b.agent, in, b.flags...)
		if code := p.wait(20 * time.Second); code == 0 {
			t.Errorf("%s: agent exited 0", b.name)
		}
		if !strings.Contains(p.stderr.String(), b.says) {
			t.Errorf("%s: agent stderr lacks %q:\n%s", b.name, b.says, p.stderr.String())
		}
	}
	coll.stop(20 * time.Second)
	cs := coll.collectorSummary()
	if cs.Sessions != 1 || cs.Rejected != uint64(len(bad)) {
		t.Errorf("collector summary %+v: want 1 session and %d rejected", cs, len(bad))
	}
	for _, b := range bad {
		if !strings.Contains(coll.stderr.String(), b.says) {
			t.Errorf("%s: the collector's log does not give the reason %q", b.name, b.says)
		}
	}
	if got := agentDirs(t, dir); !slices.Equal(got, []string{"tls1"}) {
		t.Errorf("collector dir holds %q, want only [tls1]", got)
	}
	checkAgentDir(t, filepath.Join(dir, "tls1")).expectExactlyOnce(t, "tls1", map[uint32]uint64{61: count})
}

// TestAgentNameFromCertificate: an agent given a client certificate
// ("pcapsync gen certs") and no --name takes the certificate's CN as its
// name, says so in its log, and the collector accepts it under that
// name; a --name that differs from the CN is refused by the collector,
// naming both.
func TestAgentNameFromCertificate(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	work := t.TempDir()
	certs := genCerts(t, ctx, filepath.Join(work, "certs"), "127.0.0.1", "h1")
	in := filepath.Join(work, "in.pcap")
	const count = 500
	writeGenFile(t, in, genConfig(count, 62))
	dir := filepath.Join(work, "out")
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--tls-cert", filepath.Join(certs, "collector.pem"),
		"--tls-key", filepath.Join(certs, "collector-key.pem"), "--tls-client-ca", filepath.Join(certs, "ca.pem"))
	tlsFlags := []string{"agent", "--collector", addr, "--read", in, "--tls-ca", filepath.Join(certs, "ca.pem"),
		"--tls-cert", filepath.Join(certs, "agent-h1.pem"), "--tls-key", filepath.Join(certs, "agent-h1-key.pem")}

	a := startProc(t, ctx, "agent without --name", "", tlsFlags...)
	finishReplay(t, a, count, 30*time.Second)
	if log := a.stderr.String(); !strings.Contains(log, "agent name taken from the client certificate") || !strings.Contains(log, "name=h1") {
		t.Errorf("the agent's log does not say it took the name h1 from its certificate:\n%s", log)
	}

	other := startProc(t, ctx, "agent --name vm", "", append(tlsFlags, "--name", "vm")...)
	if code := other.wait(20 * time.Second); code == 0 {
		t.Errorf("agent --name vm with the certificate of h1 exited 0")
	}
	if want := `agent name "vm", certificate CN "h1"`; !strings.Contains(other.stderr.String(), want) {
		t.Errorf("agent --name vm: stderr lacks %q:\n%s", want, other.stderr.String())
	}
	coll.stop(20 * time.Second)
	if got := agentDirs(t, dir); !slices.Equal(got, []string{"h1"}) {
		t.Errorf("collector dir holds %q, want only [h1]", got)
	}
	checkAgentDir(t, filepath.Join(dir, "h1")).expectExactlyOnce(t, "h1", map[uint32]uint64{62: count})
}

// TestSecurityRequired: neither a collector nor an agent starts without
// TLS or --insecure, and both say what to add.
func TestSecurityRequired(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"collector", "--dir", dir, "--listen", "127.0.0.1:0"},
		{"agent", "--collector", "127.0.0.1:1", "--read", filepath.Join(dir, "none.pcap")},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, pcapsyncBin, args...).CombinedOutput()
		cancel()
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 2 || !strings.Contains(string(out), "--insecure") || !strings.Contains(string(out), "--tls-") {
			t.Errorf("pcapsync %s: exit %d (%v), output %q; want exit 2 naming --tls-... and --insecure", args[0], code, err, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the refused collector created %d entries in its directory", len(ents))
	}
}

// genCerts runs "pcapsync gen certs" into dir for the collector names
// and agents given (comma-separated lists) and returns dir.
func genCerts(t *testing.T, ctx context.Context, dir, collector, agents string) string {
	t.Helper()
	gc := startProc(t, ctx, "gen certs", "", "gen", "certs", "--dir", dir, "--collector", collector, "--agents", agents)
	if code := gc.wait(20 * time.Second); code != 0 {
		t.Fatalf("gen certs exited %d", code)
	}
	return dir
}

func genConfig(count uint64, stream uint32) gen.FileConfig {
	return gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: uint64(stream)}
}

// checkCertificateMetrics: the process whose metrics are at addr
// exports the expiry of every certificate of the files below dir (base
// name: role), as the files hold it, and nothing else.
func checkCertificateMetrics(t *testing.T, addr, dir string, files map[string]string) {
	t.Helper()
	const name = "pcapsync_tls_certificate_expiry_timestamp_seconds"
	got := map[string]float64{} // file, role, subject -> value
	for _, m := range scrapeMetrics(t, addr)[name].GetMetric() {
		l := map[string]string{}
		for _, lp := range m.GetLabel() {
			l[lp.GetName()] = lp.GetValue()
		}
		got[l["file"]+" "+l["role"]+" "+l["subject"]] = m.GetGauge().GetValue()
	}
	want := map[string]float64{}
	for file, role := range files {
		path := filepath.Join(dir, file)
		rest, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for {
			var blk *pem.Block
			if blk, rest = pem.Decode(rest); blk == nil {
				break
			}
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			want[path+" "+role+" "+c.Subject.CommonName] = float64(c.NotAfter.Unix())
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("%s at %s:\n got %v\nwant %v", name, addr, got, want)
	}
}
