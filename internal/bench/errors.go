package bench

import "errors"

// Errors callers test with errors.Is; the benches wrap them with their
// name.
var (
	// ErrNotLinux: the bench, or the measurement, reads /proc, cgroups
	// or network namespaces, which only Linux has.
	ErrNotLinux = errors.New("only on Linux")

	// ErrNeedsRoot: the bench, or one of its options, needs root
	// (network namespaces, packet capture, a memory cgroup, dropping
	// the page cache).
	ErrNeedsRoot = errors.New("needs root")
)
