//go:build !trace

package functrace

import "io"

// Enabled reports whether tracing is compiled in (build tag trace).
const Enabled = false

// Trace returns the function to defer. Without the build tag trace it
// does nothing: Trace is inlined and returns a package-level no-op.
func Trace() func() { return noop }

func noop() {}

// SetOutput does nothing without the build tag trace.
func SetOutput(w io.Writer) {}
