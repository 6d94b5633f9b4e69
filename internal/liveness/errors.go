package liveness

import "errors"

// ErrPeerTimeout wraps the error of a Read that waited Reader.Timeout
// without receiving a byte. The error is also a net.Error whose Timeout
// method reports true.
var ErrPeerTimeout = errors.New("peer sent nothing")
