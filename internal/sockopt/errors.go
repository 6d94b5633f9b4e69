package sockopt

// SetBuffers defines no sentinel errors: its errors wrap the net
// package's (the socket's descriptor could not be reached, or the
// portable setter failed) with what was being set. A caller logs them
// and carries on with the kernel's sizes; a buffer smaller than asked
// is no error but the size returned.
