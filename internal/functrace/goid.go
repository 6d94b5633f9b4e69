package functrace

import (
	"runtime"
	"sync"
)

// goroutineID returns the id of the calling goroutine, parsed from the
// first line of runtime.Stack ("goroutine 7 [running]:") without
// allocating: the stack is printed into a 64-byte array from a pool
// (runtime.Stack makes its buffer escape), which holds the first line
// whatever the id, and the digits are read in place. It returns 0 if the
// line does not have that form.
//
// runtime.Stack still walks the stack, which is most of the cost; the
// runtime does not export the id, and reading it from the runtime's g
// would take assembly or unsafe offsets into runtime internals.
func goroutineID() uint64 {
	buf := stackBufs.Get().(*[64]byte)
	n := runtime.Stack(buf[:], false)
	id := parseGoroutineID(buf[:n])
	stackBufs.Put(buf)
	return id
}

var stackBufs = sync.Pool{New: func() any { return new([64]byte) }}

// parseGoroutineID reads the id from "goroutine 7 [running]:...".
func parseGoroutineID(b []byte) uint64 {
	const prefix = "goroutine "
	if len(b) < len(prefix) || string(b[:len(prefix)]) != prefix {
		return 0
	}
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
