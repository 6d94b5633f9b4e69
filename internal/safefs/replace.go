package safefs

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// createTemp creates a new file in dir, prefix and a random number its
// name, exclusively (never through a link planted under the name),
// with mode 0640 less the umask: what the data files and their indexes
// get, so that the files a reader of the root needs (retention's index)
// are readable by the same group.
func createTemp(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
	return nil, &fs.PathError{Op: "createtemp", Path: filepath.Join(dir, prefix+"*"), Err: fs.ErrExist}
}

// WriteReplace writes b to path through a temporary file beside it
// (path's name, ".tmp" and a random number; mode 0640 less the umask),
// created exclusively (never through a link planted under its name),
// synced when sync, then renamed over path (which replaces whatever
// path was, a link included, and never writes through it). On an error
// the temporary file is removed.
func WriteReplace(path string, b []byte, sync bool) error {
	tmp, err := createTemp(filepath.Dir(path), filepath.Base(path)+".tmp")
	if err != nil {
		return err
	}
	_, err = tmp.Write(b)
	if err == nil && sync {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

// EnsureDir makes the directory path (mode 0750 less the umask) unless
// it is there, and checks that it is a directory and not a link (Dir).
// Its parent must exist.
func EnsureDir(path string) error {
	if err := os.Mkdir(path, 0o750); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return Dir(path)
}

// TryLock takes an exclusive flock(2) on f without waiting; it reports
// busy when another open file description holds it.
func TryLock(f *os.File) (busy bool, err error) {
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}
