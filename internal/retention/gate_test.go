package retention

import (
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestWriteGate: a write within the allowance does not wait; one past it
// waits until retention sets a new allowance, for at most maxHold, and
// not at all once retention has not looked for maxHold.
func TestWriteGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c Counters
		g := newWriteGate(&c)
		woken := 0
		wake := func() { woken++ }
		g.admit(1<<40, wake) // open until the first set
		if c.Holds.Load() != 0 {
			t.Fatalf("an open gate held a write")
		}

		g.set(100)
		g.admit(60, wake)
		var done atomic.Bool
		go func() {
			g.admit(60, wake)
			done.Store(true)
		}()
		synctest.Wait()
		if done.Load() {
			t.Fatalf("a write past the allowance did not wait")
		}
		if woken == 0 {
			t.Errorf("a waiting write did not wake retention")
		}
		time.Sleep(time.Second)
		g.set(100) // retention deleted: room again
		synctest.Wait()
		if !done.Load() {
			t.Fatalf("the write still waits after the allowance was raised")
		}
		if got := g.allow.Load(); got != 40 {
			t.Errorf("allowance after the held write: %d, want 40", got)
		}
		if c.Holds.Load() != 1 || time.Duration(c.HeldNanos.Load()) != time.Second {
			t.Errorf("holds %d for %v, want 1 for 1s", c.Holds.Load(), time.Duration(c.HeldNanos.Load()))
		}

		// Retention keeps looking but frees nothing: the write goes
		// ahead after maxHold.
		g.set(0)
		done.Store(false)
		var held time.Duration
		go func() {
			start := time.Now()
			g.admit(10, wake)
			held = time.Since(start)
			done.Store(true)
		}()
		for !done.Load() {
			time.Sleep(time.Second)
			g.set(0)
			synctest.Wait()
		}
		if held != maxHold {
			t.Errorf("held for %v, want maxHold (%v)", held, maxHold)
		}

		// Retention stopped looking: no wait at all.
		g.set(0)
		time.Sleep(maxHold + time.Second)
		start := time.Now()
		g.admit(10, wake)
		if held := time.Since(start); held != 0 {
			t.Errorf("held for %v although retention has not looked for %v", held, maxHold+time.Second)
		}
	})
}
