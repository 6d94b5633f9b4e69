package pki

import "errors"

// Sentinel errors; test with errors.Is.
var (
	// ErrIdentity: an agent name is neither the Subject CN nor a DNS name
	// of its client certificate.
	ErrIdentity = errors.New("agent name does not match the client certificate")
	// ErrExists: a file that would be written already exists.
	ErrExists = errors.New("file exists")
	// ErrEmptyToken: a token file holds nothing but white space.
	ErrEmptyToken = errors.New("token is empty")
)
