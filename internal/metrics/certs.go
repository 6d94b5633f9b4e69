package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pcapsync/pcapsync/internal/pki"
)

// WatchCertificates exports when each certificate the process was
// started with expires, as
// pcapsync_tls_certificate_expiry_timestamp_seconds{file, role,
// subject}: the certificates as read at start, which is what the
// process presents and trusts until it restarts.
func WatchCertificates(reg prometheus.Registerer, certs []pki.Certificate) {
	if len(certs) == 0 {
		return
	}
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pcapsync_tls_certificate_expiry_timestamp_seconds",
		Help: "When a certificate the process was started with expires (Unix time): its own (role cert: the leaf, then intermediates) and the CAs it trusts (role ca).",
	}, []string{"file", "role", "subject"})
	for _, c := range certs {
		g.WithLabelValues(c.File, c.Role, c.Subject).Set(float64(c.NotAfter.UnixNano()) / 1e9)
	}
	reg.MustRegister(g)
}
