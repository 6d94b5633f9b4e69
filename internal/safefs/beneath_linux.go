package safefs

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// noOpenat2 is set once openat2 was refused as missing or forbidden;
// from then on OpenIn checks directories with Lstat.
var noOpenat2 atomic.Bool

var errUnsupported = errors.New("openat2 not available")

// openBeneath opens rel below root with openat2, refusing a link in
// any element and any escape from root.
func openBeneath(root, rel string, flag int, perm uint32) (int, error) {
	if noOpenat2.Load() {
		return -1, errUnsupported
	}
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dfd)
	how := unix.OpenHow{
		Flags:   uint64(flag),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
	}
	if flag&unix.O_CREAT != 0 {
		how.Mode = uint64(perm)
	}
	fd, err := unix.Openat2(dfd, rel, &how)
	switch {
	case errors.Is(err, unix.ENOSYS):
		noOpenat2.Store(true)
		return -1, errUnsupported
	case errors.Is(err, unix.EPERM):
		// A seccomp filter refusing openat2, or a real refusal that the
		// fallback's open reports as it is.
		return -1, errUnsupported
	}
	return fd, err
}

// openDirBeneath opens the directory rel below root as a path-only
// descriptor (for the *at calls), refusing a link in any element.
func openDirBeneath(root, rel string) (int, error) {
	return openBeneath(root, rel, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
