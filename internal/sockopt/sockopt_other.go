//go:build !linux

package sockopt

import "syscall"

func force(syscall.RawConn, bool, int) bool { return false }

// sizes is unknown here: 0 says so.
func sizes(syscall.RawConn) (rcv, snd int) { return 0, 0 }
