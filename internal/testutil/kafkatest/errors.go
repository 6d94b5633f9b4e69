package kafkatest

import "errors"

var (
	// ErrMissing is wrapped by Launch's error when java or the broker's
	// jars are not there (scripts/kafka.sh fetches them).
	ErrMissing = errors.New("kafka prerequisite missing")
	// ErrCertKey: Options has a certificate without its key, or a key
	// without its certificate.
	ErrCertKey = errors.New("a certificate and its key go together")
	// ErrClientCANoTLS: Options.ClientCAFile without a TLS listener
	// (CertFile, KeyFile).
	ErrClientCANoTLS = errors.New("client certificates need a TLS listener (CertFile, KeyFile)")
	// ErrSCRAMSyntax: a SCRAM user's name or password holds one of
	// ,[]= (the StorageTool's syntax).
	ErrSCRAMSyntax = errors.New("name or password holds one of ,[]=")
)
