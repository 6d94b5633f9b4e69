package main

import (
	"context"
	"errors"
	"io"
)

// tailRedis follows the agent's Redis stream for o and writes pcapng to
// stdout.
func tailRedis(ctx context.Context, o tailOptions, stdout, stderr io.Writer) error {
	return errors.New("tail --redis: not implemented yet")
}
