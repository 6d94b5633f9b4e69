// Package pki provides what mutual TLS between agents and collector
// needs: a small certificate authority that issues collector and agent
// certificates (for "pcapsync gen certs" and for tests), TLS
// configurations loaded from PEM files, and the rule that binds an
// agent's name to its client certificate.
//
// Keys are ECDSA P-256. Certificates and TLS configurations require
// TLS 1.2 at least; Go negotiates 1.3 whenever both sides speak it.
package pki
