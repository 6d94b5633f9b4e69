//go:build trace

package functrace

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Enabled reports whether tracing is compiled in (build tag trace).
const Enabled = true

// EnvFile names the environment variable holding the file that trace
// lines go to when SetOutput has not been called.
const EnvFile = "PCAPSYNC_TRACE"

var (
	mu     sync.Mutex
	out    io.Writer          // nil until SetOutput or the first line
	depths = map[uint64]int{} // call depth per goroutine id; 0 is deleted
	line   []byte             // scratch for one line, guarded by mu
)

// SetOutput sends the trace lines to w from now on; nil restores the
// default (PCAPSYNC_TRACE or os.Stderr, chosen again at the next line).
// It is safe for concurrent use; w's Write is called with one whole line
// at a time, never concurrently, under the package's lock, so it must
// not call traced functions.
func SetOutput(w io.Writer) {
	mu.Lock()
	out = w
	mu.Unlock()
}

// Trace prints the entry into its caller and returns the function that
// prints the return from it; use it as
//
//	defer functrace.Trace()()
func Trace() func() {
	name := "?"
	if pc, _, _, ok := runtime.Caller(1); ok {
		if f := runtime.FuncForPC(pc); f != nil {
			name = shortName(f.Name())
		}
	}
	id := goroutineID()
	mu.Lock()
	d := depths[id] + 1
	depths[id] = d
	writeLine(id, d, "->", name)
	mu.Unlock()
	return func() {
		mu.Lock()
		d := depths[id]
		writeLine(id, d, "<-", name)
		if d <= 1 {
			delete(depths, id)
		} else {
			depths[id] = d - 1
		}
		mu.Unlock()
	}
}

// shortName strips the directories of the import path:
// "github.com/x/y/internal/collector.(*Session).Batch" becomes
// "collector.(*Session).Batch".
func shortName(name string) string {
	// The last slash before any "[" (generic type arguments may hold
	// import paths of their own).
	path := name
	if i := strings.IndexByte(path, '['); i >= 0 {
		path = path[:i]
	}
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return name[i+1:]
	}
	return name
}

// writeLine writes one line; mu must be held.
func writeLine(id uint64, depth int, arrow, name string) {
	if out == nil {
		out = openOutput()
	}
	line = appendLine(line[:0], id, depth, arrow, name)
	_, _ = out.Write(line) // a trace that cannot be written must not stop the program
}

// appendLine appends "g[01]:    ->name\n" to dst.
func appendLine(dst []byte, id uint64, depth int, arrow, name string) []byte {
	dst = append(dst, "g["...)
	if id < 10 {
		dst = append(dst, '0')
	}
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, "]:"...)
	for range depth {
		dst = append(dst, "    "...)
	}
	dst = append(dst, arrow...)
	dst = append(dst, name...)
	return append(dst, '\n')
}

// openOutput returns the file named by PCAPSYNC_TRACE, or os.Stderr when
// the variable is empty or the file cannot be created (said once on
// os.Stderr). The file stays open until the program exits.
func openOutput() io.Writer {
	name := os.Getenv(EnvFile)
	if name == "" {
		return os.Stderr
	}
	f, err := os.Create(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, "functrace: %s: %v; tracing to stderr\n", EnvFile, err)
		return os.Stderr
	}
	return f
}
