package flowquery

import "errors"

// ErrTooManyFlows is wrapped by the error Run returns when the flows
// selected are more than Config.MaxFlows: the records are joined and
// sorted in memory, which is bounded by it. Narrow the selection (a
// shorter time range, agents, a filter) or raise the bound.
var ErrTooManyFlows = errors.New("too many flows selected")

// ErrBadFilter is wrapped by the error New returns for a filter libpcap
// refuses or one beyond capture.CheckFilter's limits: a usage error.
var ErrBadFilter = errors.New("bad filter")

// ErrConfig is wrapped by Validate's errors.
var ErrConfig = errors.New("invalid flow query")
