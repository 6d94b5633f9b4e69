//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// Live needs Linux network namespaces and packet capture.
func Live(context.Context, LiveConfig) ([]LiveMixResult, error) {
	return nil, fmt.Errorf("bench live: %w", ErrNotLinux)
}
