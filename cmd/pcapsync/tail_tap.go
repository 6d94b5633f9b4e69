package main

import (
	"context"
	"errors"
	"io"
)

// tailTap streams the collector's tap for o to stdout as pcapng.
func tailTap(ctx context.Context, o tailOptions, stdout, stderr io.Writer) error {
	return errors.New("tail --collector-admin: not implemented yet")
}
