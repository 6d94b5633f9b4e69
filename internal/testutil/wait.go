package testutil

import (
	"errors"
	"testing"
	"time"
)

// Eventually polls cond until it returns nil and fails t with cond's
// last error once timeout passed: the error says what is still missing
// ("3 of 5 files closed"), so a failure explains itself. It polls at
// once, then every millisecond, backing off to every 20 ms. Call it
// from the test's goroutine (it calls t.Fatalf). Inside a
// testing/synctest bubble the timeout and the polling run on the
// bubble's clock.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := Poll(timeout, cond); err != nil {
		t.Fatalf("not within %s: %v", timeout, err)
	}
}

// EventuallyTrue is Eventually for a condition without an explanation:
// on timeout it fails t with "not within TIMEOUT: WHAT".
func EventuallyTrue(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, timeout, func() error {
		if cond() {
			return nil
		}
		return errors.New(what)
	})
}

// Poll is Eventually for use off the test's goroutine: it returns nil
// once cond does, or cond's last error once timeout passed.
func Poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 20*time.Millisecond) {
		err := cond()
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrGiveUp) || !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(pause, time.Until(deadline))) // the last poll at the deadline
	}
}
