//go:build !linux

package store

import "testing"

// mountTmpfs skips the test: mounting a tmpfs is Linux's.
func mountTmpfs(t *testing.T, size int64) string {
	t.Helper()
	t.Skip("mounting a tmpfs needs Linux")
	return ""
}

// remountReadOnly is never reached: mountTmpfs skipped the test.
func remountReadOnly(t *testing.T, dir string) { t.Helper() }
