package correlate

import "errors"

// ErrNoAgent is wrapped by the error Run returns when an agent named in
// Config.Agents has no directory below Config.Dir.
var ErrNoAgent = errors.New("no such agent")
