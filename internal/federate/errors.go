package federate

import "errors"

// ErrServer is wrapped by the error Run returns when a server failed
// (refused, unreachable, timed out, failed mid-stream) and
// Config.Partial is not set; the error names the server and why.
var ErrServer = errors.New("a server failed")

// ErrNoServer is wrapped by the error Run returns when every server
// failed, Partial or not: there is no answer to give.
var ErrNoServer = errors.New("no server answered")

// ErrStream is wrapped by the error of a server whose stream is not
// what a query listener sends: not pcapng, a block too large, more
// interfaces than MaxInterfaces, a result that contradicts the stream.
var ErrStream = errors.New("bad stream")

// ErrTimedOut is wrapped by the error of a server that sent nothing
// (no answer, no byte) for the deadline.
var ErrTimedOut = errors.New("timed out")
