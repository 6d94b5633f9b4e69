package frontdoor

import "errors"

// Errors callers test with errors.Is.
var (
	// ErrConfig wraps every error of Config.Validate and Budget.
	ErrConfig = errors.New("listener configuration")
)
