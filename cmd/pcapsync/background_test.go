package main

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

// runBackground runs the command line args in-process until the test
// ends (then cancels its context and waits up to 20 s for it). It
// returns the command's stderr and a channel that gets run's error when
// the command stops by itself.
func runBackground(t *testing.T, args ...string) (stderr *testutil.Buffer, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = new(testutil.Buffer)
	ch := make(chan error, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ch <- run(ctx, args, io.Discard, stderr)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-stopped:
		case <-time.After(20 * time.Second):
			t.Errorf("%q did not stop within 20 s of its context", args)
		}
	})
	return stderr, ch
}
