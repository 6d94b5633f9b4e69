package tap

import "errors"

// ErrBadRequest is wrapped by every error ParseRequest returns.
var ErrBadRequest = errors.New("bad tap request")

// ErrRefused is wrapped by the error Stream returns when the collector
// refused the request (its ERROR line); the error text carries the
// collector's reason.
var ErrRefused = errors.New("the collector refused the tap")

// ErrStreamEnded is wrapped by the error Stream returns when the
// collector ended the stream: it stopped, or dropped this client as too
// slow.
var ErrStreamEnded = errors.New("the collector ended the stream")
