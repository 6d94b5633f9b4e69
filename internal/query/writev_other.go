//go:build !linux

package query

import "io"

// fileWritev returns nil: writev is used on Linux only, elsewhere the
// output's buffer is written with Write (asyncWriter).
func fileWritev(io.Writer) func([][]byte) error { return nil }
