package agentproc

import "errors"

// ErrConfig matches the errors of Validate: a Config that cannot run.
var ErrConfig = errors.New("bad configuration")
