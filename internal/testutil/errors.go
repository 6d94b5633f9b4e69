package testutil

import "errors"

// ErrGiveUp, wrapped in a condition's error, ends Eventually or Poll at
// once with that error: the condition can no longer come true (the
// process that was to do it exited).
var ErrGiveUp = errors.New("giving up")
