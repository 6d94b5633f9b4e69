package units

import "errors"

// Errors callers test with errors.Is; ParseSize wraps them with the
// size it was given.
var (
	// ErrSyntax: not a whole number with one of the suffixes ParseSize
	// takes.
	ErrSyntax = errors.New("want a whole number with an optional K, M, G or T suffix")

	// ErrRange: a size too large for where it goes (over 2^62 for
	// ParseSize; a caller with a smaller limit wraps it too).
	ErrRange = errors.New("too large")
)
