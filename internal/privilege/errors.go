package privilege

import "errors"

// Sentinel errors. Test for them with [errors.Is].
var (
	// ErrNotRoot is returned by Drop when the process does not run as
	// root (effective user id 0) and is not already the user asked for.
	ErrNotRoot = errors.New("switching user needs root")

	// ErrNoUser is returned by Drop when the user (or, by number, the
	// user id) does not exist.
	ErrNoUser = errors.New("no such user")

	// ErrNotDropped is returned by Drop when a thread still shows
	// credentials it was asked to give up after the switch.
	ErrNotDropped = errors.New("privileges not dropped")

	// ErrNotSupported is returned by Drop on systems other than Linux.
	ErrNotSupported = errors.New("dropping privileges is only supported on linux")

	// ErrNotWritable is returned by Writable when the process may not
	// make files in the directory.
	ErrNotWritable = errors.New("not writable by the user")
)
