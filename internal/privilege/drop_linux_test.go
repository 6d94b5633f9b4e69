//go:build linux

package privilege

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// helperEnv makes the test binary run dropHelper instead of the tests:
// Drop cannot be undone, so it runs in a child process.
const helperEnv = "PRIVILEGE_TEST_DROP"

// writableEnv makes the test binary run writableHelper instead.
const writableEnv = "PRIVILEGE_TEST_WRITABLE"

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(dropHelper(spec))
	}
	if spec := os.Getenv(writableEnv); spec != "" {
		os.Exit(writableHelper(spec))
	}
	os.Exit(m.Run())
}

// writableHelper drops to the user spec names ("USER:DIR") and prints
// what Writable(DIR) says: "ok", or "error:", the error and whether it
// matches ErrNotWritable.
func writableHelper(spec string) int {
	name, dir, _ := strings.Cut(spec, ":")
	if _, err := Drop(Config{User: name}); err != nil {
		fmt.Println("drop:", err)
		return 1
	}
	if err := Writable(dir); err != nil {
		fmt.Println("error:", err, errors.Is(err, ErrNotWritable))
		return 0
	}
	fmt.Println("ok")
	return 0
}

// dropHelper starts threads busy in system calls, drops to the user and
// capabilities spec names ("USER:cap,cap"), and prints every thread's
// credentials as JSON, or the error.
func dropHelper(spec string) int {
	name, capList, _ := strings.Cut(spec, ":")
	var keep []Cap
	for _, c := range strings.Split(capList, ",") {
		switch c {
		case "net_raw":
			keep = append(keep, NetRaw)
		case "net_admin":
			keep = append(keep, NetAdmin)
		}
	}
	// Threads the runtime made before the drop, some of them locked
	// and asleep in the kernel while it happens.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			for {
				select {
				case <-stop:
					return
				default:
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	_, err := Drop(Config{User: name, Keep: keep})
	close(stop)
	wg.Wait()
	if err != nil {
		fmt.Println("error:", err, errors.Is(err, ErrNotRoot), errors.Is(err, ErrNoUser))
		return 0
	}
	cs, err := Read(0)
	if err != nil {
		fmt.Println("error:", err)
		return 0
	}
	json.NewEncoder(os.Stdout).Encode(cs)
	return 0
}

// runDrop runs dropHelper with spec and returns every thread's
// credentials, or the helper's error line.
func runDrop(t *testing.T, spec string) ([]Creds, string) {
	t.Helper()
	out := runHelper(t, helperEnv, spec)
	if s := string(out); strings.HasPrefix(s, "error:") {
		return nil, strings.TrimSpace(s)
	}
	var cs []Creds
	if err := json.Unmarshal(out, &cs); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	return cs, ""
}

// runHelper runs the test binary with env set to spec (a helper of
// TestMain) and returns what it printed.
func runHelper(t *testing.T, env, spec string) []byte {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+spec)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	return out
}

func TestDrop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: Drop needs root")
	}
	tests := []struct {
		spec string
		keep Set
	}{
		{"nobody:", 0},
		{"nobody:net_raw", SetOf(NetRaw)},
		{"65534:net_raw,net_admin", SetOf(NetRaw, NetAdmin)},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			cs, errLine := runDrop(t, tt.spec)
			if errLine != "" {
				t.Fatal(errLine)
			}
			if len(cs) < 5 {
				t.Errorf("%d threads, want the 4 locked ones and the main thread at least", len(cs))
			}
			for i, c := range cs {
				if bad := check(c, 65534, nogroup(t), []int{nogroup(t)}, tt.keep); bad != "" {
					t.Errorf("thread %d: %s (%v)", i, bad, c)
				}
			}
		})
	}
	t.Run("no such user", func(t *testing.T) {
		_, errLine := runDrop(t, "pcapsync-no-such-user:")
		if !strings.Contains(errLine, "no such user") || !strings.HasSuffix(errLine, "false true") {
			t.Errorf("helper said %q, want ErrNoUser", errLine)
		}
	})
}

// nogroup returns the primary group of nobody.
func nogroup(t *testing.T) int {
	t.Helper()
	u, err := Lookup("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(u.Groups, u.GID) {
		t.Fatalf("nobody's groups %v lack its group %d", u.Groups, u.GID)
	}
	return u.GID
}
