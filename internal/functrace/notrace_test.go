//go:build !trace

package functrace

import (
	"os/exec"
	"strings"
	"testing"
)

func TestNoopAllocs(t *testing.T) {
	x := 0
	if a := testing.AllocsPerRun(1000, func() { x = traced(x) }); a != 0 {
		t.Errorf("a function with defer Trace()() allocates %v times per call, want 0", a)
	}
}

// TestTraceInlined checks with the compiler's own report that Trace is
// inlined, which is what makes the no-op free.
func TestTraceInlined(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH:", err)
	}
	if testing.Short() {
		t.Skip("runs the compiler; skipped with -short")
	}
	out, err := exec.Command(gobin, "build", "-gcflags=-m", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "can inline Trace") {
		t.Errorf("the compiler does not report \"can inline Trace\":\n%s", out)
	}
}
