package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
)

// runCore opens a Store in the caller's synctest bubble and runs its
// ticker (Run) until t's cleanup, which then closes it.
func runCore(t *testing.T, cfg Config) *testCore {
	t.Helper()
	cfg.Fsync = FsyncNever
	c := newCore(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	t.Cleanup(func() {
		cancel()
		<-ran
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// files counts an agent directory's unfinished (.part) and closed files.
func files(t *testing.T, dir string) (open, closed int) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch {
		case index.IsIndex(e.Name()):
		case strings.HasSuffix(e.Name(), layout.PartSuffix):
			open++
		default:
			closed++
		}
	}
	return open, closed
}

// write begins a session of agent name, writes batch seq of 10 packets
// and commits it.
func write(t *testing.T, c *testCore, name string, seq uint64) *testSession {
	t.Helper()
	s, _, err := c.Begin(hello(name, name[0]), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(0, batchPayload(seq, int(seq-1)*10, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Commit(); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRunIdleClose: Run closes a file IdleClose after its session
// lingered (a lost connection), on its first tick after that and not
// before; a session that begins again within IdleClose continues the
// same file. In a synctest bubble: Run's ticker runs on the bubble's
// clock, so a minute passes at once and the times are exact.
func TestRunIdleClose(t *testing.T) {
	const idle = time.Minute
	tests := []struct {
		name       string
		returnedAt time.Duration // after Linger; 0: never
		wantFiles  int
	}{
		{"idle closes", 0, 1},
		{"reconnect continues the file", idle / 2, 1},
		{"reconnect after the close starts a new file", idle + time.Second, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := runCore(t, Config{IdleClose: idle})
				dir := filepath.Join(c.Dir(), "lost")
				write(t, c, "lost", 1).End(false) // Linger
				if tt.returnedAt > 0 {
					time.Sleep(tt.returnedAt)        // the bubble's clock: the agent is back this long after it left
					write(t, c, "lost", 2).End(true) // goodbye: closed at once
					synctest.Wait()
					if open, closed := files(t, dir); open != 0 || closed != tt.wantFiles {
						t.Fatalf("%d open and %d closed files, want %d closed", open, closed, tt.wantFiles)
					}
					return
				}
				time.Sleep(idle) // a tick falls here: the file is not yet idle for longer than IdleClose
				synctest.Wait()
				if open, closed := files(t, dir); open != 1 || closed != 0 {
					t.Fatalf("after IdleClose: %d open, %d closed files; want the file still open", open, closed)
				}
				time.Sleep(250 * time.Millisecond) // the next tick
				synctest.Wait()
				if open, closed := files(t, dir); open != 0 || closed != 1 {
					t.Fatalf("a tick after IdleClose: %d open, %d closed files; want it closed", open, closed)
				}
			})
		})
	}
}

// TestRunRotatesOnTime: Run closes a file at the wall-clock multiple of
// RotateInterval though nothing is written (the bubble's clock starts
// at midnight UTC); the next batch opens a new file.
func TestRunRotatesOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 10 * time.Minute
		c := runCore(t, Config{RotateInterval: every})
		dir := filepath.Join(c.Dir(), "rot")
		time.Sleep(time.Minute) // the bubble's clock: the batch comes a minute into the interval
		s := write(t, c, "rot", 1)
		time.Sleep(every - time.Minute - 250*time.Millisecond) // the last tick before the rotation
		synctest.Wait()
		if open, closed := files(t, dir); open != 1 || closed != 0 {
			t.Fatalf("before the rotation: %d open, %d closed files; want one open", open, closed)
		}
		time.Sleep(250 * time.Millisecond) // at the rotation's instant, a tick
		synctest.Wait()
		if open, closed := files(t, dir); open != 0 || closed != 1 {
			t.Fatalf("at the rotation: %d open, %d closed files; want it closed", open, closed)
		}
		if _, err := s.Batch(0, batchPayload(2, 10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		s.End(true)
		pkts, n := readDir(t, dir)
		if n != 2 || len(pkts) != 20 {
			t.Fatalf("%d files with %d packets, want 2 with 20", n, len(pkts))
		}
	})
}
