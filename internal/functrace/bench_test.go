package functrace

import (
	"io"
	"testing"
)

//go:noinline
func plain(x int) int { return x + 1 }

//go:noinline
func traced(x int) int {
	defer Trace()()
	return x + 1
}

// BenchmarkTraced is a function with "defer Trace()()"; BenchmarkPlain
// the same function without it. Without the build tag trace they are the
// same to within a nanosecond.
func BenchmarkTraced(b *testing.B) {
	SetOutput(io.Discard)
	b.Cleanup(func() { SetOutput(nil) })
	b.ReportAllocs()
	x := 0
	for b.Loop() {
		x = traced(x)
	}
}

func BenchmarkPlain(b *testing.B) {
	b.ReportAllocs()
	x := 0
	for b.Loop() {
		x = plain(x)
	}
}
