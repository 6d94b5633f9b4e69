package freeport

import "errors"

// ErrNone is wrapped by Reserve's error when every port of the range
// is held or in use.
var ErrNone = errors.New("no free port")
