//go:build !linux

package privilege

// Drop returns ErrNotSupported: see the Linux version.
func Drop(Config) (Creds, error) { return Creds{}, ErrNotSupported }
