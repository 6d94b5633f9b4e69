package pki

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// Roles of a Certificate.
const (
	RoleCert = "cert" // the process's own certificate chain (a leaf, then its intermediates)
	RoleCA   = "ca"   // trusted to verify peers
)

// Certificate is one certificate of a PEM file a process was started
// with: what its metrics report, so that an alert fires before it
// expires.
type Certificate struct {
	File     string
	Role     string // RoleCert or RoleCA
	Subject  string // the subject's common name, or the whole subject when it has none
	NotAfter time.Time
}

// ReadCertificates reads every certificate of the PEM file, in file
// order, with the role given. Blocks other than certificates (a key in
// the same file) are skipped; a file without a certificate is an
// error.
func ReadCertificates(role, file string) ([]Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("tls: %w", err)
	}
	var certs []Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("tls: %s: certificate %d: %w", file, len(certs)+1, err)
		}
		subject := c.Subject.CommonName
		if subject == "" {
			subject = c.Subject.String()
		}
		certs = append(certs, Certificate{File: file, Role: role, Subject: subject, NotAfter: c.NotAfter})
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("tls: %s holds no PEM certificate", file)
	}
	return certs, nil
}

// CertificateFiles reads the certificates of each (role, file) pair
// whose file is not "", in order.
func CertificateFiles(pairs ...[2]string) ([]Certificate, error) {
	var all []Certificate
	for _, p := range pairs {
		if p[1] == "" {
			continue
		}
		c, err := ReadCertificates(p[0], p[1])
		if err != nil {
			return nil, err
		}
		all = append(all, c...)
	}
	return all, nil
}
