//go:build unix

package safefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Open opens name for reading. It refuses a symbolic link as name's
// last element (ErrLink) and anything but a regular file
// (ErrNotRegular), without blocking on a FIFO or device.
func Open(name string) (*os.File, error) {
	return OpenFile(name, os.O_RDONLY, 0)
}

// OpenFile is os.OpenFile with Open's rules: the last element of name
// is never followed if it is a link, and the result is a regular file.
// With os.O_CREATE|os.O_EXCL a planted name of any kind fails with
// fs.ErrExist.
func OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	fd, err := unix.Open(name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, openError(name, err)
	}
	return regular(fd, name)
}

// CreateExcl creates name for writing; it fails if anything, a link
// included, already has the name.
func CreateExcl(name string, perm fs.FileMode) (*os.File, error) {
	return OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
}

// OpenIn opens rel below root with OpenFile's rules for every element
// of rel, directories included: no element may be a symbolic link, and
// rel may not leave root (ErrPath).
func OpenIn(root, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	rel, err := clean(rel)
	if err != nil {
		return nil, err
	}
	name := filepath.Join(root, rel)
	fd, err := openBeneath(root, rel, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, uint32(perm.Perm()))
	if errors.Is(err, errUnsupported) {
		if err := DirsIn(root, filepath.Dir(rel)); err != nil {
			return nil, err
		}
		return OpenFile(name, flag, perm)
	}
	if err != nil {
		return nil, openError(name, err)
	}
	return regular(fd, name)
}

// DirsIn checks that rel and every directory above it up to root are
// directories and not links. An empty rel or "." checks nothing.
func DirsIn(root, rel string) error {
	rel, err := clean(rel)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	p := root
	for _, e := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, e)
		if err := Dir(p); err != nil {
			return err
		}
	}
	return nil
}

// Dir checks that name is a directory and not a symbolic link.
func Dir(name string) error {
	fi, err := os.Lstat(name)
	if err != nil {
		return err
	}
	return dirMode(name, fi.Mode())
}

// IsRegular reports whether fi, from Lstat or a directory listing,
// describes a regular file: not a link, FIFO, device or directory.
func IsRegular(fi fs.FileInfo) bool { return fi.Mode().IsRegular() }

// ReadFile reads the regular file name (Open's rules) whole, refusing
// one larger than limit bytes (ErrTooLarge) before reading it.
func ReadFile(name string, limit int64) ([]byte, error) {
	f, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, limit %d: %w", name, fi.Size(), limit, ErrTooLarge)
	}
	// The file may grow after the Stat: read at most limit+1 bytes.
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes: %w", name, limit, ErrTooLarge)
	}
	return b, nil
}

func dirMode(name string, m fs.FileMode) error {
	switch {
	case m&fs.ModeSymlink != 0:
		return &fs.PathError{Op: "open", Path: name, Err: ErrLink}
	case !m.IsDir():
		return &fs.PathError{Op: "open", Path: name, Err: ErrNotDir}
	}
	return nil
}

// regular takes fd, opened non-blocking, and returns it as a blocking
// *os.File if it is a regular file; otherwise it closes it.
func regular(fd int, name string) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotRegular}
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fcntl", Path: name, Err: err}
	}
	return os.NewFile(uintptr(fd), name), nil
}

// openError maps the errno of a refused link to ErrLink. O_NOFOLLOW
// fails with ELOOP on a link (EMLINK on some BSDs); openat2's
// RESOLVE_NO_SYMLINKS with ELOOP too; RESOLVE_BENEATH with EXDEV.
func openError(name string, err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EMLINK):
		err = ErrLink
	case errors.Is(err, unix.EXDEV):
		err = ErrPath
	}
	return &fs.PathError{Op: "open", Path: name, Err: err}
}

func clean(rel string) (string, error) {
	if filepath.IsAbs(rel) || !filepath.IsLocal(rel) && rel != "." && rel != "" {
		return "", &fs.PathError{Op: "open", Path: rel, Err: ErrPath}
	}
	return filepath.Clean(rel), nil
}

// RemoveIn removes the file rel below root (never a directory) with
// OpenIn's rules for the directories above it: none may be a symbolic
// link, so a link planted in place of a directory cannot make it remove
// a file elsewhere. A link as rel's last element is removed itself, as
// os.Remove does.
func RemoveIn(root, rel string) error {
	rel, err := clean(rel)
	if err != nil {
		return err
	}
	name := filepath.Join(root, rel)
	dir, base := filepath.Split(rel)
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "." {
		return &fs.PathError{Op: "remove", Path: name, Err: ErrPath}
	}
	dfd, err := openDirBeneath(root, dir)
	if errors.Is(err, errUnsupported) {
		if err := DirsIn(root, dir); err != nil {
			return err
		}
		return removeFile(name)
	}
	if err != nil {
		return openError(filepath.Join(root, dir), err)
	}
	defer unix.Close(dfd)
	if err := unix.Unlinkat(dfd, base, 0); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

func removeFile(name string) error {
	if err := unix.Unlink(name); err != nil {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}
