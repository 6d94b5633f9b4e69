package pcapzstd

import "errors"

// ErrClosed is returned by Write after Close, until Reset.
var ErrClosed = errors.New("pcapzstd: frame closed")
