package metrics

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrConfig is matched by every error of Config.Validate (and so of
	// Listen for a Config it refuses).
	ErrConfig = errors.New("bad metrics configuration")

	// ErrAddress: FetchStatus was given an address it cannot make a
	// URL of; the error names it.
	ErrAddress = errors.New("bad status address")

	// ErrNotStatus: the listener answered FetchStatus, but not with a
	// collector's status (an HTTP error, more than MaxStatusSize bytes,
	// or JSON that is not a Status); the error says which.
	ErrNotStatus = errors.New("the answer is not a collector's status")

	// ErrNoAnswer: FetchStatus reached nothing at the address
	// (connection refused, no route, no answer in time); the error
	// names the address.
	ErrNoAnswer = errors.New("nothing answers")

	// ErrNotHTTP: something at the address took the connection but did
	// not answer HTTP (it closed, reset, or sent something else), as a
	// collector's agents' port or a tap does; the error names the
	// address.
	ErrNotHTTP = errors.New("did not answer HTTP")
)
