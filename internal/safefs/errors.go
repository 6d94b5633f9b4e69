package safefs

import "errors"

// Errors callers test with errors.Is; the functions wrap them with the
// path they refused.
var (
	// ErrLink: a symbolic link where a file or directory was expected.
	ErrLink = errors.New("symbolic link refused")

	// ErrNotRegular: the path names a FIFO, device, socket or directory
	// where a regular file was expected.
	ErrNotRegular = errors.New("not a regular file")

	// ErrNotDir: the path names something other than a directory where
	// one was expected.
	ErrNotDir = errors.New("not a directory")

	// ErrTooLarge: ReadFile's file is over the limit it was given.
	ErrTooLarge = errors.New("file over the size limit")

	// ErrPath: a relative path that leaves its root ("..", absolute).
	ErrPath = errors.New("path leaves its root")
)
