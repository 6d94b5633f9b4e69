package redisfeed

import "errors"

// ErrBadEntry: a stream entry is not one this package writes (a missing
// field, a malformed frame, a bad checksum, records that do not
// decompress or refer to an undeclared interface).
var ErrBadEntry = errors.New("bad stream entry")
