package bench

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// The copy floor (MethodFloor): the replay file's bytes over one
// loopback TCP connection into a file, read and written in floorCopy
// copies, parsing nothing: what moving the bytes costs, without
// anything a capture pipeline does per packet. Its two ends are
// processes of their own, as the pipeline's are: this executable (the
// lab binary, or a test binary of this package) started with
// floorEnv set, which runs one end at start-up (init) and exits.
const (
	floorCopy = 1 << 20
	// floorEnv: "recv ADDR FILE" (listen on ADDR, take one connection,
	// write what it sends into FILE, created) or "send ADDR FILE"
	// (connect to ADDR, send FILE, close).
	floorEnv = "PCAPSYNC_BENCH_FLOOR"
)

func init() {
	spec, ok := os.LookupEnv(floorEnv)
	if !ok {
		return
	}
	if err := floorEnd(spec); err != nil {
		fmt.Fprintln(os.Stderr, "copy floor:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// floorEnd runs the end of the copy floor that spec (floorEnv's value)
// names.
func floorEnd(spec string) error {
	f := strings.Fields(spec)
	if len(f) != 3 {
		return fmt.Errorf("%s=%q: want recv|send ADDR FILE", floorEnv, spec)
	}
	switch f[0] {
	case "recv":
		return floorRecv(f[1], f[2])
	case "send":
		return floorSend(f[1], f[2])
	}
	return fmt.Errorf("%s=%q: want recv or send", floorEnv, spec)
}

// floorRecv listens on addr, takes one connection and writes everything
// it sends into a new file at path.
func floorRecv(addr, path string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	c, err := l.Accept()
	l.Close()
	if err != nil {
		return err
	}
	defer c.Close()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := copyPlain(out, c); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// floorSend connects to addr and sends the file at path.
func floorSend(addr, path string) error {
	in, err := os.Open(path)
	if err != nil {
		return err
	}
	defer in.Close()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	if err := copyPlain(c, in); err != nil {
		c.Close()
		return err
	}
	return c.Close()
}

// copyPlain copies r to w in writes of floorCopy bytes (the last one
// shorter), each filled by as many reads as it takes: not io.Copy,
// which would hand a file and a socket to sendfile or splice and copy
// nothing in user space.
func copyPlain(w io.Writer, r io.Reader) error {
	buf := make([]byte, floorCopy)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
