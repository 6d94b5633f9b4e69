package pcapflate

import "errors"

// ErrClosed is what Write returns after Close, until Reset.
var ErrClosed = errors.New("pcapflate: write after close")
