package pki

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"
)

// ServerConfig returns the collector's TLS configuration: its
// certificate and key from PEM files and, if clientCAFile is set, the
// CAs that must have signed every agent's client certificate (client
// certificates are then required and verified: chain, validity, client
// authentication usage). The collector's own certificate must be valid
// now. TLS 1.2 at least.
func ServerConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("tls: a certificate and its key are both needed")
	}
	cert, err := loadKeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if clientCAFile != "" {
		pool, err := loadPool(clientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ClientConfig returns an agent's TLS configuration: the collector's
// certificate is verified against the CAs in caFile ("" means the
// system's roots) and, unless serverName is "" (then the caller sets it
// from the address it dials), against serverName. certFile and keyFile,
// given together or not at all, are the agent's client certificate.
// TLS 1.2 at least.
func ClientConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pool, err := loadPool(caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := loadKeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		// Always present the certificate, even when the collector names
		// other CAs in its request: the collector then logs why it
		// refuses the certificate, instead of "no certificate".
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }
	case certFile != "" || keyFile != "":
		return nil, errors.New("tls: a client certificate and its key go together")
	}
	return cfg, nil
}

// loadKeyPair loads a certificate chain and its key and checks that the
// certificate is valid now, so that an expired one stops the program at
// start rather than failing every handshake.
func loadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return cert, fmt.Errorf("tls: loading %s and %s: %w", certFile, keyFile, err)
	}
	leaf := cert.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return cert, fmt.Errorf("tls: %s: %w", certFile, err)
		}
		cert.Leaf = leaf
	}
	now := time.Now()
	if now.After(leaf.NotAfter) {
		return cert, fmt.Errorf("tls: certificate %s expired at %s", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if now.Before(leaf.NotBefore) {
		return cert, fmt.Errorf("tls: certificate %s is not valid before %s", certFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	return cert, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: reading CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return pool, nil
}

// CheckIdentity binds an agent's name to its verified client
// certificate: the name must equal the Subject CN or one of the DNS
// names, exactly (agent names are case-sensitive directory names). The
// error wraps ErrIdentity and says what the certificate names.
func CheckIdentity(cert *x509.Certificate, name string) error {
	if cert.Subject.CommonName == name || slices.Contains(cert.DNSNames, name) {
		return nil
	}
	return fmt.Errorf("%w: agent name %q, certificate CN %q, DNS names %q", ErrIdentity, name, cert.Subject.CommonName, cert.DNSNames)
}
