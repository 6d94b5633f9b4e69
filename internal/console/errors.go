package console

import "errors"

// ErrConfig is wrapped by Config.Validate's errors.
var ErrConfig = errors.New("console: bad configuration")
