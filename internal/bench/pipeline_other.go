//go:build !linux

package bench

import (
	"context"
	"fmt"
)

// Pipeline reads /proc and wait4's peak RSS: Linux only.
func Pipeline(context.Context, PipelineConfig) ([]MixResult, error) {
	return nil, fmt.Errorf("bench pipeline: %w", ErrNotLinux)
}
