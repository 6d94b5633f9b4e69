//go:build unix && !linux

package safefs

import (
	"errors"
	"sync/atomic"
)

// noOpenat2 is always in effect here: there is no openat2.
var noOpenat2 atomic.Bool

var errUnsupported = errors.New("openat2 not available")

func openBeneath(root, rel string, flag int, perm uint32) (int, error) {
	return -1, errUnsupported
}

func openDirBeneath(root, rel string) (int, error) {
	return -1, errUnsupported
}
