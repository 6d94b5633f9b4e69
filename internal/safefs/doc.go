// Package safefs opens files under a directory that others can write.
//
// Everything below an output root is hostile to the process reading it:
// a user who can write the root can plant a symbolic link where the
// store expects its own file, or a FIFO or device where it expects an
// index. The functions here never follow a symbolic link in the part of
// a path they are told to check, never block on opening a FIFO or a
// device, and return only regular files (ErrNotRegular for anything
// else) or directories that are not links (Dir). Creating a file is
// exclusive (CreateExcl), so a name planted in advance fails instead
// of being written through.
//
// OpenIn and CreateIn check every element of a path below a root: on
// Linux with openat2(2) and RESOLVE_NO_SYMLINKS|RESOLVE_BENEATH in one
// system call, elsewhere (and where openat2 is refused, as under an
// old kernel or a seccomp filter) by checking each directory with
// Lstat before the open, which leaves a window in which a directory
// can be swapped for a link. The root itself may be a link: it is the
// operator's choice, not the writers'.
//
// The functions are safe for concurrent use; a returned *os.File is the
// caller's to close.
package safefs
