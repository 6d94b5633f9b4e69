package filter

import "errors"

// ErrBadProgram is wrapped by the error of a program libpcap compiled
// that this package's interpreter does not take (an unknown opcode, a
// jump outside it, no return at its end): a libpcap this package does
// not know, never a user's mistake.
var ErrBadProgram = errors.New("libpcap's program not valid")
