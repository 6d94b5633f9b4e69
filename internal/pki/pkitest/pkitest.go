// Package pkitest makes certificates in files for tests of TLS between
// agents and collector: a CA with a collector certificate for 127.0.0.1,
// a foreign CA, and client certificates on demand.
package pkitest

import (
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/pki"
)

// ServerName is the DNS name in the collector's certificate, besides
// the IP address 127.0.0.1.
const ServerName = "collector.test"

// PKI is a test CA, a foreign CA, and the collector's certificate
// (CN "collector", DNS ServerName, IP 127.0.0.1), all valid for an hour
// around now, written below Dir.
type PKI struct {
	Dir                   string
	CA, Foreign           *pki.Authority
	CAFile, ForeignFile   string // the CAs' certificates
	ServerCert, ServerKey string // the collector's
	notBefore, notAfter   time.Time
}

// New makes a PKI in a temporary directory.
func New(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir(), notBefore: time.Now().Add(-time.Hour), notAfter: time.Now().Add(time.Hour)}
	var err error
	if p.CA, err = pki.NewAuthority("test CA", p.notBefore, p.notAfter); err != nil {
		t.Fatal(err)
	}
	if p.Foreign, err = pki.NewAuthority("foreign CA", p.notBefore, p.notAfter); err != nil {
		t.Fatal(err)
	}
	p.CAFile = p.write(t, "ca.pem", p.CA.CertPEM)
	p.ForeignFile = p.write(t, "foreign.pem", p.Foreign.CertPEM)
	p.ServerCert, p.ServerKey = p.Issue(t, p.CA, "collector", pki.Leaf{CommonName: "collector",
		DNSNames: []string{ServerName}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true})
	return p
}

func (p *PKI) write(t testing.TB, name string, b []byte) string {
	t.Helper()
	f := filepath.Join(p.Dir, name)
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// Issue writes a certificate and its key signed by ca to Dir/file.pem
// and Dir/file-key.pem. A zero validity means an hour around now.
func (p *PKI) Issue(t testing.TB, ca *pki.Authority, file string, l pki.Leaf) (cert, key string) {
	t.Helper()
	if l.NotAfter.IsZero() {
		l.NotBefore, l.NotAfter = p.notBefore, p.notAfter
	}
	c, k, err := ca.Issue(l)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, file+".pem", c), p.write(t, file+"-key.pem", k)
}

// Server returns the collector's TLS configuration; mutual requires
// client certificates signed by CA.
func (p *PKI) Server(t testing.TB, mutual bool) *tls.Config {
	t.Helper()
	ca := ""
	if mutual {
		ca = p.CAFile
	}
	cfg, err := pki.ServerConfig(p.ServerCert, p.ServerKey, ca)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Client returns an agent's TLS configuration as pki.ClientConfig makes
// it: the collector verified against caFile and serverName (if empty,
// the agent takes the host it dials), the client certificate cert and
// key if given.
func (p *PKI) Client(t testing.TB, caFile, cert, key, serverName string) *tls.Config {
	t.Helper()
	cfg, err := pki.ClientConfig(caFile, cert, key, serverName)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// RawClient is a client configuration for dialing 127.0.0.1 that
// trusts CA and presents any certificate, expired or not: for testing
// what the collector refuses.
func (p *PKI) RawClient(t testing.TB, cert, key string) *tls.Config {
	t.Helper()
	cfg := p.Client(t, p.CAFile, "", "", "127.0.0.1")
	if cert != "" {
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &kp, nil }
	}
	return cfg
}
