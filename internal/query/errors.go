package query

import "errors"

// ErrFileGone is wrapped by the error Run returns when a file it had
// selected was removed (by retention, or by hand) before it could be
// opened: the result would lack its packets, so the query fails rather
// than skip it. What was written before stays a valid pcapng stream.
var ErrFileGone = errors.New("file removed before it was read")

// ErrOutOfOrder is wrapped by the error Run returns when a file holds a
// packet older than one the query already wrote for the same agent:
// the agent's files are out of timestamp order by more than the reorder
// window (Config.ReorderMem) holds.
var ErrOutOfOrder = errors.New("packets out of order beyond the reorder window")

// ErrBadTime is wrapped by the errors of ParseTime, and by Validate's
// for a bound outside the times a query can hold (1677 to 2262: int64
// nanoseconds since the Unix epoch).
var ErrBadTime = errors.New("bad time")

// ErrBadFilter is wrapped by the error Validate returns for a filter
// beyond the limits (capture.MaxFilterLen, capture.MaxFilterTerms; the
// error names the limit), and by the error Prepare and Run return for
// one that does not compile: a usage error, found before anything is
// read or written. The error reads "filter: " and the reason.
var ErrBadFilter = errors.New("bad filter")

// filterError is a filter refused: ErrBadFilter and its reason.
type filterError struct{ err error }

func (e *filterError) Error() string   { return "filter: " + e.err.Error() }
func (e *filterError) Unwrap() []error { return []error{ErrBadFilter, e.err} }
