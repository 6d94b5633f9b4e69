package queryhttp

import "errors"

// ErrBadRequest is wrapped by the errors of a query's parameters (the
// server answers 400 with the message), and by Fetch's when the server
// answered 400.
var ErrBadRequest = errors.New("bad query parameter")

// ErrRefused is wrapped by the error Fetch returns when the server
// refused the query (401, 403, 503, ...); the error carries its reason.
var ErrRefused = errors.New("the server refused the query")

// ErrFailed is wrapped by the error Fetch returns when the query failed
// on the server after its stream began (the Pcapsync-Error trailer), or
// the stream ended without the server's result: what was written is
// incomplete.
var ErrFailed = errors.New("the remote query failed")
