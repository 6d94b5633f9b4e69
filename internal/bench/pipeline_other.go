//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Pipeline reads /proc and wait4's peak RSS: Linux only.
func Pipeline(context.Context, PipelineConfig) ([]MixResult, error) {
	return nil, errors.New("bench pipeline: Linux only")
}
