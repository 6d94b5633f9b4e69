// Package functrace prints a function call chain, one line when a
// function is entered and one when it returns, so that a run can be
// followed from capture to file without a debugger.
//
// A traced function starts with
//
//	defer functrace.Trace()()
//
// which the functrace command (cmd/functrace) injects into, and removes
// from, every function of the files or packages it is given. Tracing is
// compiled in only with the build tag trace:
//
//	go build -tags trace ./cmd/pcapsync
//
// Without the tag Trace returns a package-level function that does
// nothing, and Trace itself is inlined: what remains is the open-coded
// defer of that function, measured at about 2 ns per call and no
// allocations (BenchmarkTraced 2.6-3.0 ns against BenchmarkPlain
// 0.94-1.1 ns, the same function without the defer, on a 2-core Xeon VM,
// Go 1.26.8). TestTraceInlined and TestNoopAllocs keep it so.
//
// With the tag every line has the form
//
//	g[01]:    ->collector.(*Session).Batch
//	g[01]:    <-collector.(*Session).Batch
//
// that is "g[", the goroutine id padded to two digits, "]:", four spaces
// per call depth of that goroutine (the outermost traced call has depth
// 1), "->" on entry or "<-" on return, and the function name without its
// import path's directories (runtime.FuncForPC, "pkg.Func",
// "pkg.(*T).Method", "pkg.F[...]" for generic functions). The depth is
// counted per goroutine, so concurrent chains stay apart; lines are
// written whole, one Write each, under one mutex.
//
// Output goes to os.Stderr, or to the file named by the environment
// variable PCAPSYNC_TRACE (created or truncated at the first traced
// call), or to the writer passed to SetOutput, which wins over both.
//
// The goroutine id comes from the first line of runtime.Stack ("goroutine
// 7 [running]:"), printed into a pooled 64-byte array and parsed in
// place. BenchmarkGoroutineID measured that at 1.80-1.85 µs and 0
// allocations, against 2.0-2.5 µs and 3 allocations (192 B) for the
// naive parse that turns the buffer into a string and splits it with
// strings.Fields: the parse is the smaller part, runtime.Stack's walk
// of the stack the larger, and it stays. Trace takes the id once per
// call; the returned function reuses it. A traced call (enter and
// return, to io.Discard) measured 3.6-4.0 µs and 3 allocations.
package functrace
