package pki

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
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

// Result is what WriteSet did, file by file.
type Result struct {
	Written  []string   // files that were not there
	Kept     []string   // files that were there, as asked
	Reissued []Reissued // certificates replaced, each with a new key
}

// Reissued is a certificate that WriteSet replaced because it was not
// what was asked, with its new key.
type Reissued struct {
	Cert, Key string
	// Why says what differed: the names ("names a, b; it had a"), the
	// CA, the validity or the key.
	Why string
}

// WriteSet writes a CA, a collector certificate and agent certificates
// into dir (created 0700 if missing). A CA already in dir is reused, so
// that agents can be added later. A certificate already in dir is kept
// when it has the names asked (the collector's CN and alternative
// names, an agent's CN and DNS name), is signed by the CA, has not
// expired and its key file holds its key; otherwise it is reissued from
// the CA with a new key (each file replaced by a rename). Keys are
// written 0600, certificates 0644. The Result lists what it did, also
// with an error.
func WriteSet(dir string, s Set) (Result, error) {
	var res Result
	if s.Validity == 0 {
		s.Validity = 365 * 24 * time.Hour
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return res, err
	}
	now := time.Now().Add(-5 * time.Minute) // tolerate clock skew between hosts
	ca, err := loadOrCreateCA(dir, now, &res)
	if err != nil {
		return res, err
	}
	issue := func(certName, keyName string, l Leaf) error {
		certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
		why, exists, err := ca.differs(certPath, keyPath, l, time.Now())
		switch {
		case err != nil:
			return err
		case exists && why == "":
			res.Kept = append(res.Kept, certPath)
			return nil
		}
		l.NotBefore, l.NotAfter = now, now.Add(s.Validity)
		c, k, err := ca.Issue(l)
		if err != nil {
			return err
		}
		// The key first: a certificate on disk means its key is there too
		// (and if not, the next run sees the pair differ and reissues).
		if err := replace(keyPath, k, 0o600); err != nil {
			return err
		}
		if err := replace(certPath, c, 0o644); err != nil {
			return err
		}
		if exists {
			res.Reissued = append(res.Reissued, Reissued{Cert: certPath, Key: keyPath, Why: why})
		} else {
			res.Written = append(res.Written, certPath, keyPath)
		}
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
			return res, err
		}
	}
	for _, name := range s.Agents {
		if name == "" || name[0] == '.' || strings.ContainsAny(name, `/\`) {
			return res, fmt.Errorf("agent name %q cannot name a file", name)
		}
		cf, kf := AgentFiles(name)
		if err := issue(cf, kf, Leaf{CommonName: name, DNSNames: []string{name}, Client: true}); err != nil {
			return res, err
		}
	}
	return res, nil
}

// loadOrCreateCA loads the CA of dir, or creates it if dir has none,
// and records which in res.
func loadOrCreateCA(dir string, now time.Time, res *Result) (*Authority, error) {
	caCert, caKey := filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	ca, err := LoadAuthority(caCert, caKey)
	switch {
	case err == nil:
		res.Kept = append(res.Kept, caCert, caKey)
		return ca, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	if _, serr := os.Stat(caCert); serr == nil {
		return nil, fmt.Errorf("%s exists but %s does not: cannot issue with that CA", caCert, caKey)
	}
	if ca, err = NewAuthority("pcapsync CA", now, now.Add(10*365*24*time.Hour)); err != nil {
		return nil, err
	}
	kp, err := ca.KeyPEM()
	if err != nil {
		return nil, err
	}
	if err := writeNew(caKey, kp, 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(caCert, ca.CertPEM, 0o644); err != nil {
		return nil, err
	}
	res.Written = append(res.Written, caCert, caKey)
	return ca, nil
}

// differs reports why the certificate in certPath (with its key in
// keyPath) is not the one a would issue for l at time at, "" if it is;
// exists is false if there is no certificate file. A file that holds no
// certificate is an error: it is not replaced.
func (a *Authority) differs(certPath, keyPath string, l Leaf, at time.Time) (why string, exists bool, err error) {
	b, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	} else if err != nil {
		return "", true, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return "", true, fmt.Errorf("%s: no PEM certificate: move it away to issue a new one", certPath)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", true, fmt.Errorf("%s: %w: move it away to issue a new one", certPath, err)
	}
	want := leafNames(l.CommonName, l.DNSNames, l.IPs)
	had := leafNames(cert.Subject.CommonName, cert.DNSNames, cert.IPAddresses)
	switch {
	case cert.Subject.CommonName != l.CommonName || !sameSet(want, had):
		return fmt.Sprintf("names %s; it had %s", strings.Join(want, ", "), strings.Join(had, ", ")), true, nil
	case cert.CheckSignatureFrom(a.Cert) != nil:
		return fmt.Sprintf("not signed by the CA %q of %s", a.Cert.Subject.CommonName, CAFile), true, nil
	case at.After(cert.NotAfter):
		return "expired " + cert.NotAfter.UTC().Format(time.RFC3339), true, nil
	}
	if _, err := tls.LoadX509KeyPair(certPath, keyPath); err != nil {
		return fmt.Sprintf("its key %s: %v", filepath.Base(keyPath), err), true, nil
	}
	return "", true, nil
}

// leafNames lists a certificate's names: the CN first, then the DNS
// names and IP addresses that are not the CN.
func leafNames(cn string, dns []string, ips []net.IP) []string {
	names := []string{cn}
	for _, n := range dns {
		if n != cn {
			names = append(names, n)
		}
	}
	for _, ip := range ips {
		if s := ip.String(); s != cn {
			names = append(names, s)
		}
	}
	return names
}

// sameSet reports whether a and b hold the same strings, in any order.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// replace writes b to path through a new file renamed over it, so that
// path holds the old content or the new, never a part.
func replace(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".new"
	os.Remove(tmp) // of a run that died
	if err := writeNew(tmp, b, mode); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
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
