//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// Query reads /proc/PID/io and waits with waitid: Linux only.
func Query(context.Context, QueryConfig) (QueryResult, error) {
	return QueryResult{}, fmt.Errorf("bench query: %w", ErrNotLinux)
}
