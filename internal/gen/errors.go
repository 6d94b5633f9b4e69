package gen

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrCorrupt: Parse found a generated payload (its marker) whose
	// bytes are not the ones its stream and sequence number make.
	ErrCorrupt = errors.New("payload does not match its pattern")

	// ErrMix: a Mix that is none of the named ones.
	ErrMix = errors.New("unknown packet mix")
)
