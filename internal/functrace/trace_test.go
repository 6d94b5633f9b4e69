//go:build trace

package functrace

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// capture sends the trace to a buffer until the test ends.
func capture(t *testing.T) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	SetOutput(&buf)
	t.Cleanup(func() { SetOutput(nil) })
	return &buf
}

func outer() {
	defer Trace()()
	inner()
}

func inner() {
	defer Trace()()
}

func TestNested(t *testing.T) {
	buf := capture(t)
	outer()
	want := strings.ReplaceAll(`g[ID]:    ->functrace.outer
g[ID]:        ->functrace.inner
g[ID]:        <-functrace.inner
g[ID]:    <-functrace.outer
`, "ID", fmt.Sprintf("%02d", goroutineID()))
	if buf.String() != want {
		t.Errorf("trace:\n%s\nwant:\n%s", buf, want)
	}
	mu.Lock()
	left := len(depths)
	mu.Unlock()
	if left != 0 {
		t.Errorf("%d goroutines left in the depth map, want 0", left)
	}
}

// TestConcurrent checks that every goroutine's lines nest on their own:
// read per id, depths go 1, 2, 2, 1 with matching names.
func TestConcurrent(t *testing.T) {
	buf := capture(t)
	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for range 10 {
				outer()
			}
		})
	}
	wg.Wait()
	lineRE := regexp.MustCompile(`^g\[(\d+)\]:((?:    )+)(->|<-)(\S+)$`)
	perG := map[string][]string{}
	for l := range strings.Lines(buf.String()) {
		m := lineRE.FindStringSubmatch(strings.TrimSuffix(l, "\n"))
		if m == nil {
			t.Fatalf("line %q does not have the form g[ID]:    ->name", l)
		}
		perG[m[1]] = append(perG[m[1]], m[2]+m[3]+m[4])
	}
	if len(perG) != n {
		t.Errorf("%d goroutine ids, want %d", len(perG), n)
	}
	want := strings.Repeat("    ->functrace.outer|        ->functrace.inner|        <-functrace.inner|    <-functrace.outer|", 10)
	for id, lines := range perG {
		if got := strings.Join(lines, "|") + "|"; got != want {
			t.Errorf("goroutine %s:\n%s\nwant\n%s", id, got, want)
		}
	}
}

func TestShortName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"main.main", "main.main"},
		{"github.com/pcapsync/pcapsync/internal/collector.(*Session).Batch", "collector.(*Session).Batch"},
		{"github.com/pcapsync/pcapsync/internal/agent.(*builder).seal", "agent.(*builder).seal"},
		{"example.com/m/p.Map[...]", "p.Map[...]"},
		{"example.com/m/p.F[example.com/m/q.T]", "p.F[example.com/m/q.T]"},
		{"example.com/m/p.f.func1", "p.f.func1"},
	} {
		if got := shortName(tc.in); got != tc.want {
			t.Errorf("shortName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestAppendLine(t *testing.T) {
	for _, tc := range []struct {
		id    uint64
		depth int
		arrow string
		want  string
	}{
		{1, 1, "->", "g[01]:    ->p.F\n"},
		{7, 2, "<-", "g[07]:        <-p.F\n"},
		{12345, 1, "->", "g[12345]:    ->p.F\n"},
		{0, 0, "->", "g[00]:->p.F\n"},
	} {
		if got := string(appendLine(nil, tc.id, tc.depth, tc.arrow, "p.F")); got != tc.want {
			t.Errorf("appendLine(%d, %d, %q) = %q, want %q", tc.id, tc.depth, tc.arrow, got, tc.want)
		}
	}
}

func TestEnvFile(t *testing.T) {
	name := filepath.Join(t.TempDir(), "trace.txt")
	t.Setenv(EnvFile, name)
	w := openOutput()
	f, ok := w.(*os.File)
	if !ok || f.Name() != name {
		t.Fatalf("openOutput() = %v, want the file %s", w, name)
	}
	t.Cleanup(func() { f.Close() })

	t.Setenv(EnvFile, filepath.Join(t.TempDir(), "missing", "trace.txt"))
	if w := openOutput(); w != os.Stderr {
		t.Errorf("openOutput() with an unwritable %s = %v, want os.Stderr", EnvFile, w)
	}
	t.Setenv(EnvFile, "")
	if w := openOutput(); w != os.Stderr {
		t.Errorf("openOutput() without %s = %v, want os.Stderr", EnvFile, w)
	}
}
