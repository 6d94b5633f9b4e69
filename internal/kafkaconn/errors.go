package kafkaconn

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrNotAuthorized: the broker refused a request for lack of a
	// permission (an ACL); the message names the operation and the
	// broker's error (kerr.TopicAuthorizationFailed,
	// kerr.ClusterAuthorizationFailed), which the error also wraps.
	ErrNotAuthorized = errors.New("not authorized")
	// ErrEmptyPassword: the SASL password file holds nothing but white
	// space.
	ErrEmptyPassword = errors.New("password file is empty")
	// ErrEmptyRecordKey: the record key file holds nothing but white
	// space.
	ErrEmptyRecordKey = errors.New("record key file is empty")
)
