//go:build unix

// Package freeport hands out loopback ports for servers that tests and
// the lab start in other processes (where a listener on port 0 cannot
// be handed over). "Listen on :0, close, return the port" is racy: the
// kernel gives the same ephemeral port to the next :0 of any process,
// and two test binaries running at once can pick the same one. A port
// from here is outside the kernel's ephemeral range and held, until it
// is released, by an flock on a file named after it, which every user
// of this package honours across processes; it was free for TCP and
// UDP on 127.0.0.1 when handed out. Only a process that does not use
// this package can still take it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// First and Last bound the ports handed out: below Linux's default
// ephemeral range (32768-60999), which :0 binds draw from.
const (
	First = 20000
	Last  = 29999
)

// Reserve returns a port held for the caller until release is called.
func Reserve() (port int, release func(), err error) {
	dir := filepath.Join(os.TempDir(), "pcapsync-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return 0, nil, fmt.Errorf("freeport: %w", err)
	}
	n := Last - First + 1
	start := rand.IntN(n)
	for i := range n {
		p := First + (start+i)%n
		f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(p)), os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return 0, nil, fmt.Errorf("freeport: %w", err)
		}
		// The lock is the open file's: closing it releases the port.
		// The files are never removed (a removed file could be locked
		// through an old descriptor while a new one is locked too).
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		if !free(p) {
			f.Close()
			continue
		}
		return p, func() { f.Close() }, nil
	}
	return 0, nil, fmt.Errorf("freeport: %w in %d-%d", ErrNone, First, Last)
}

// free reports whether TCP and UDP on 127.0.0.1:p can be bound now.
func free(p int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// TB is what Port needs of a testing.TB.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Port returns a port held until tb ends; it fails tb if none is free.
func Port(tb TB) int {
	tb.Helper()
	p, release, err := Reserve()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(release)
	return p
}

// Addr is Port as "127.0.0.1:PORT".
func Addr(tb TB) string {
	tb.Helper()
	return "127.0.0.1:" + strconv.Itoa(Port(tb))
}
