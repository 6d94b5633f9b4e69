package capgen

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrLink: a link type name that Links does not hold.
	ErrLink = errors.New("unknown link type")
)
