//go:build trace

package functrace_test

import (
	"bytes"
	"fmt"
	"regexp"

	"github.com/pcapsync/pcapsync/internal/functrace"
)

func receive() {
	defer functrace.Trace()()
	write()
}

func write() {
	defer functrace.Trace()()
}

// The goroutine id depends on how many goroutines the program started
// before; the example writes the trace to a buffer and prints it with
// the id replaced by 01 so that its output is fixed.
func Example() {
	var buf bytes.Buffer
	functrace.SetOutput(&buf)
	receive()
	functrace.SetOutput(nil)
	fmt.Print(regexp.MustCompile(`(?m)^g\[\d+\]`).ReplaceAllString(buf.String(), "g[01]"))
	// Output:
	// g[01]:    ->functrace_test.receive
	// g[01]:        ->functrace_test.write
	// g[01]:        <-functrace_test.write
	// g[01]:    <-functrace_test.receive
}
