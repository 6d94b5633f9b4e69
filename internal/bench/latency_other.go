//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// Latency needs Linux network namespaces and packet capture.
func Latency(context.Context, LatencyConfig) (LatencyResult, error) {
	return LatencyResult{}, fmt.Errorf("bench latency: %w", ErrNotLinux)
}
