//go:build unix

package metrics

import "golang.org/x/sys/unix"

// statfs returns the size of the file system holding dir and the bytes
// available on it to an unprivileged user; ok is false on an error.
func statfs(dir string) (size, avail uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), true
}
