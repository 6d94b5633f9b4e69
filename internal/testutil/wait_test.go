package testutil

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"
)

func TestPoll(t *testing.T) {
	tests := []struct {
		name     string
		readyAt  time.Duration // cond returns nil from then on; <0: never
		timeout  time.Duration
		wantErr  string
		maxCalls int
	}{
		{"ready at once", 0, time.Second, "", 1},
		{"ready later", 50 * time.Millisecond, time.Second, "", 20},
		{"never", -1, 100 * time.Millisecond, "missing at 100ms", 20},
		{"zero timeout polls once", -1, 0, "missing at 0s", 1},
		{"given up", -2, time.Second, "missing at 0s: giving up", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				calls := 0
				err := Poll(tt.timeout, func() error {
					calls++
					if tt.readyAt >= 0 && time.Since(start) >= tt.readyAt {
						return nil
					}
					if tt.readyAt == -2 {
						return fmt.Errorf("missing at %s: %w", time.Since(start), ErrGiveUp)
					}
					return fmt.Errorf("missing at %s", time.Since(start))
				})
				switch {
				case tt.wantErr == "" && err != nil:
					t.Fatalf("err %v, want nil", err)
				case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
					t.Fatalf("err %v, want %q (the last one)", err, tt.wantErr)
				}
				if calls > tt.maxCalls {
					t.Errorf("%d calls, want at most %d", calls, tt.maxCalls)
				}
				if tt.readyAt >= 0 {
					if late := time.Since(start) - tt.readyAt; late > 20*time.Millisecond {
						t.Errorf("returned %s after the condition held, want within 20ms", late)
					}
				}
			})
		})
	}
}

// failRecorder records a Fatalf instead of ending the test.
type failRecorder struct {
	testing.TB
	msg string
}

func (r *failRecorder) Helper() {}
func (r *failRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
}

func TestEventuallyReportsLastReason(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &failRecorder{TB: t}
		n := 0
		Eventually(r, time.Second, func() error { n++; return fmt.Errorf("%d of 5 closed", min(n, 3)) })
		if want := "not within 1s: 3 of 5 closed"; r.msg != want {
			t.Fatalf("failure %q, want %q", r.msg, want)
		}
		r.msg = ""
		EventuallyTrue(r, time.Second, "the file closed", func() bool { return false })
		if want := "not within 1s: the file closed"; r.msg != want {
			t.Fatalf("failure %q, want %q", r.msg, want)
		}
		r.msg = ""
		EventuallyTrue(r, time.Second, "x", func() bool { return true })
		Eventually(r, time.Second, func() error { return nil })
		if r.msg != "" {
			t.Fatalf("a condition that holds failed: %q", r.msg)
		}
	})
}
