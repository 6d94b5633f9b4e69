package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// requireEnv is set by scripts/test.sh (as root): a missing
// prerequisite fails a test there instead of skipping it.
const requireEnv = "PCAPSYNC_E2E_REQUIRE"

// requireTools skips t, or fails it when requireEnv is "1", unless
// every tool is in PATH, and, with root set, unless it runs as root.
func requireTools(t *testing.T, root bool, tools ...string) {
	t.Helper()
	var msg string
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			msg = fmt.Sprintf("needs %s in PATH (scripts/deps.sh installs it)", tool)
		}
	}
	if root && os.Geteuid() != 0 {
		msg = "needs root (network namespaces, packet capture)"
	}
	if msg == "" {
		return
	}
	if os.Getenv(requireEnv) == "1" {
		t.Fatalf("prerequisite missing (%s=1 makes this a failure): %s", requireEnv, msg)
	}
	t.Skipf("skipping: %s (set %s=1 to make this a failure)", msg, requireEnv)
}

var built struct {
	once sync.Once
	dir  string
	exe  string
	err  error
}

// pcapsyncExe returns a pcapsync binary built once for the whole test
// run (under go test, os.Executable is the test binary).
func pcapsyncExe(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "pcapsync-bench-test"); built.err != nil {
			return
		}
		built.exe = filepath.Join(built.dir, "pcapsync")
		if out, err := exec.Command("go", "build", "-o", built.exe, "../../cmd/pcapsync").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building pcapsync: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.exe
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}
