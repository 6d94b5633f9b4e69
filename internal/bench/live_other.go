//go:build !linux

package bench

import (
	"context"
	"errors"
)

// Live needs Linux network namespaces and packet capture.
func Live(context.Context, LiveConfig) ([]LiveMixResult, error) {
	return nil, errors.New("bench live: Linux only")
}
