//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Query reads /proc/PID/io and waits with waitid: Linux only.
func Query(context.Context, QueryConfig) (QueryResult, error) {
	return QueryResult{}, errors.New("bench query: Linux only")
}
