package main

import (
	"net/http"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/pki"
	"github.com/pcapsync/pcapsync/internal/pki/pkitest"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// TestAgentCertificateMetrics: an agent with TLS and --metrics exports
// the expiry of its certificate and of the CA it trusts, while it is
// still trying to reach its collector.
func TestAgentCertificateMetrics(t *testing.T) {
	p := pkitest.New(t)
	notAfter := time.Now().Add(20 * 24 * time.Hour).Truncate(time.Second)
	cert, key := p.Issue(t, p.CA, "agent-web1", pki.Leaf{CommonName: "web1", Client: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: notAfter})
	in := filepath.Join(t.TempDir(), "in.pcap")
	if err := gen.WriteFile(in, gen.FileConfig{Count: 10, Mix: gen.Mix64}); err != nil {
		t.Fatal(err)
	}
	stderr, _ := runBackground(t, "agent", "--name", "web1", "--collector", "127.0.0.1:1", "--read", in,
		"--tls-ca", p.CAFile, "--tls-cert", cert, "--tls-key", key, "--metrics", "127.0.0.1:0", "--shutdown-timeout", "100ms")
	addrRE := regexp.MustCompile(`msg="metrics listening" addr=(\S+)`)
	var addr string
	testutil.EventuallyTrue(t, 10*time.Second, "the agent's metrics listener", func() bool {
		m := addrRE.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	fams, err := metricstest.Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	const name = "pcapsync_tls_certificate_expiry_timestamp_seconds"
	if got := fams.Value(t, name, "file="+cert, "role=cert", "subject=web1"); got != float64(notAfter.Unix()) {
		t.Errorf("agent certificate expires at %v, want %v", got, notAfter.Unix())
	}
	if got := fams.Value(t, name, "file="+p.CAFile, "role=ca", "subject=test CA"); got < float64(time.Now().Unix()) {
		t.Errorf("CA expiry %v: in the past", got)
	}
	if n := len(fams[name].GetMetric()); n != 2 {
		t.Errorf("%d certificates exported, want 2", n)
	}
}
