//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Latency needs Linux network namespaces and packet capture.
func Latency(context.Context, LatencyConfig) (LatencyResult, error) {
	return LatencyResult{}, errors.New("bench latency: Linux only")
}
