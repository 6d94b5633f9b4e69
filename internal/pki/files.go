package pki

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// ReadToken reads a shared token from file: its content without
// surrounding white space (a trailing newline is normal). An empty one
// is ErrEmptyToken. A file that others than its owner may read is
// worth a warning, which goes to log.
func ReadToken(file string, log *slog.Logger) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: %w", file, ErrEmptyToken)
	}
	if fi, err := os.Stat(file); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn("the token file can be read by others than its owner: chmod 600 it", "file", file, "mode", fi.Mode().Perm().String())
	}
	return tok, nil
}

// LogCertificates logs when the certificates of cfg (loaded from file)
// expire, and warns when that is less than 30 days away.
func LogCertificates(log *slog.Logger, cfg *tls.Config, file string) {
	var leafs []*tls.Certificate
	for i := range cfg.Certificates {
		leafs = append(leafs, &cfg.Certificates[i])
	}
	if cfg.GetClientCertificate != nil {
		if c, err := cfg.GetClientCertificate(nil); err == nil {
			leafs = append(leafs, c)
		}
	}
	for _, c := range leafs {
		if c.Leaf == nil {
			continue
		}
		left := time.Until(c.Leaf.NotAfter)
		attrs := []any{"file", file, "subject", c.Leaf.Subject.CommonName, "not_after", c.Leaf.NotAfter.UTC().Format(time.RFC3339)}
		if left < 30*24*time.Hour {
			log.Warn("TLS certificate expires soon", append(attrs, "left", left.Round(time.Hour))...)
		} else {
			log.Info("TLS certificate", attrs...)
		}
	}
}
