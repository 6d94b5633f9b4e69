// Package redistest runs a throwaway redis-server (the Debian package's
// binary) for tests and benchmarks: on a free loopback port, in a
// temporary directory, without persistence, stopped at the end of the
// test. It never touches a system Redis.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireEnv, set to 1, turns a missing redis-server into a failure
// instead of a skip (the project's test script sets it).
const RequireEnv = "PCAPSYNC_E2E_REQUIRE"

// TB is what Start needs of a test, benchmark or command:
// testing.TB has it all.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

var _ TB = testing.TB(nil)

// Server is one redis-server process.
type Server struct {
	Addr string // 127.0.0.1:port
	tb   TB
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts redis-server and waits until it answers. Without
// redis-server in PATH it skips tb, or fails it when RequireEnv is 1.
func Start(tb TB) *Server {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		msg := "needs redis-server in PATH (Debian: apt-get install redis-server)"
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("prerequisite missing (%s=1 makes this a failure): %s", RequireEnv, msg)
		}
		tb.Skipf("skipping: %s", msg)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("finding a free port: %v", err)
	}
	s := &Server{Addr: ln.Addr().String(), tb: tb, dir: tb.TempDir()}
	ln.Close()
	s.start()
	tb.Cleanup(s.Stop)
	return s
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

func (s *Server) start() {
	s.tb.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"), "--daemonize", "no")
	if err := s.cmd.Start(); err != nil {
		s.tb.Fatalf("starting redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { cmd.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s.ping() == nil {
			return
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.tb.Fatalf("redis-server exited: %v\n%s", s.cmd.ProcessState, log)
		default:
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redis-server on %s did not answer within 10s", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// Kill stops the server at once (SIGKILL), as a crash would; Restart
// starts it again, empty, on the same port.
func (s *Server) Kill() {
	s.tb.Helper()
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts a killed server again on the same port.
func (s *Server) Restart() {
	s.tb.Helper()
	s.start()
}

// Stop ends the server (the test's cleanup does it too).
func (s *Server) Stop() {
	if s.cmd != nil {
		s.cmd.Process.Kill()
		<-s.done
		s.cmd = nil
	}
}
