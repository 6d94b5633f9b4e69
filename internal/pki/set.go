package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in a directory written by WriteSet. Agent files are
// AgentPrefix + name + ".pem" and AgentPrefix + name + "-key.pem".
const (
	CAFile           = "ca.pem"
	CAKeyFile        = "ca-key.pem"
	CollectorFile    = "collector.pem"
	CollectorKeyFile = "collector-key.pem"
	AgentPrefix      = "agent-"
)

// AgentFiles returns the certificate and key file names of agent name.
func AgentFiles(name string) (cert, key string) {
	return AgentPrefix + name + ".pem", AgentPrefix + name + "-key.pem"
}

// Set is what WriteSet issues.
type Set struct {
	// Collector lists the host names and IP addresses agents dial the
	// collector by; the first is also its CN. Empty: no collector
	// certificate.
	Collector []string
	// Agents are agent names; each gets a client certificate whose CN
	// and only DNS name is the name.
	Agents []string
	// Validity of issued certificates; 0 means one year. A new CA is
	// valid for ten years.
	Validity time.Duration
}

// WriteSet writes a CA, a collector certificate and agent certificates
// into dir (created 0700 if missing). A CA already in dir is reused, so
// that agents can be added later; a certificate that exists is kept, not
// replaced. Keys are written 0600, certificates 0644. It returns the
// files written and the ones kept.
func WriteSet(dir string, s Set) (written, kept []string, err error) {
	if s.Validity == 0 {
		s.Validity = 365 * 24 * time.Hour
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	now := time.Now().Add(-5 * time.Minute) // tolerate clock skew between hosts
	caCert, caKey := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	ca, err := LoadAuthority(caCert, caKey)
	switch {
	case err == nil:
		kept = append(kept, caCert, caKey)
	case errors.Is(err, fs.ErrNotExist):
		if _, serr := os.Stat(caCert); serr == nil {
			return nil, nil, fmt.Errorf("%s exists but %s does not: cannot issue with that CA", caCert, caKey)
		}
		if ca, err = NewAuthority("pcapsync CA", now, now.Add(10*365*24*time.Hour)); err != nil {
			return nil, nil, err
		}
		kp, err := ca.KeyPEM()
		if err != nil {
			return nil, nil, err
		}
		if err := writeNew(caKey, kp, 0o600); err != nil {
			return nil, nil, err
		}
		if err := writeNew(caCert, ca.CertPEM, 0o644); err != nil {
			return nil, nil, err
		}
		written = append(written, caCert, caKey)
	default:
		return nil, nil, err
	}
	issue := func(certName, keyName string, l Leaf) error {
		certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
		if _, err := os.Stat(certPath); err == nil {
			kept = append(kept, certPath)
			return nil
		}
		l.NotBefore, l.NotAfter = now, now.Add(s.Validity)
		c, k, err := ca.Issue(l)
		if err != nil {
			return err
		}
		// The key first: a certificate on disk means its key is there too.
		os.Remove(keyPath)
		if err := writeNew(keyPath, k, 0o600); err != nil {
			return err
		}
		if err := writeNew(certPath, c, 0o644); err != nil {
			return err
		}
		written = append(written, certPath, keyPath)
		return nil
	}
	if len(s.Collector) > 0 {
		l := Leaf{CommonName: s.Collector[0], Server: true}
		for _, n := range s.Collector {
			if ip := net.ParseIP(n); ip != nil {
				l.IPs = append(l.IPs, ip)
			} else {
				l.DNSNames = append(l.DNSNames, n)
			}
		}
		if err := issue(CollectorFile, CollectorKeyFile, l); err != nil {
			return written, kept, err
		}
	}
	for _, name := range s.Agents {
		if name == "" || name[0] == '.' || strings.ContainsAny(name, `/\`) {
			return written, kept, fmt.Errorf("agent name %q cannot name a file", name)
		}
		cf, kf := AgentFiles(name)
		if err := issue(cf, kf, Leaf{CommonName: name, DNSNames: []string{name}, Client: true}); err != nil {
			return written, kept, err
		}
	}
	return written, kept, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", path, ErrExists)
		}
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
