package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"sync"
	"time"
)

// proc is one process a bench runs, with its output kept and its
// resource use read when it ends.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout bytes.Buffer // read only after wait
	stderr bytes.Buffer // read only after wait

	once  sync.Once
	err   error
	usage procUsage
}

// procUsage is what a process used, from wait4's rusage. It covers the
// process and every child it reaped (rsync's forked receiver, for one);
// MaxRSS is the largest of them, not their sum.
type procUsage struct {
	User, Sys time.Duration
	MaxRSS    int64 // bytes
}

// CPU returns user plus system time.
func (u procUsage) CPU() time.Duration { return u.User + u.Sys }

// wait waits for the process once and records its usage; later calls
// return the first call's error. Safe for concurrent use.
func (p *proc) wait() error {
	p.once.Do(func() {
		p.err = p.cmd.Wait()
		if st := p.cmd.ProcessState; st != nil {
			p.usage = procUsage{User: st.UserTime(), Sys: st.SystemTime(), MaxRSS: maxRSS(st)}
		}
	})
	return p.err
}

// procSet starts processes and, on stop, kills and reaps every one
// still running, so that a bench that fails half-way leaves nothing
// behind.
type procSet struct {
	ctx   context.Context
	procs []*proc
}

// start starts args[0] with args[1:]. setup, when not nil, may set the
// command's stdin, stdout or stderr before it starts (the proc's own
// buffers are the default for stdout and stderr).
func (s *procSet) start(name string, setup func(*exec.Cmd), args ...string) (*proc, error) {
	p := &proc{name: name, cmd: exec.CommandContext(s.ctx, args[0], args[1:]...)}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if setup != nil {
		setup(p.cmd)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// startIn starts args inside network namespace ns ("ip netns exec"
// execs the command, so the process and its usage are the command's).
func (s *procSet) startIn(ns, name string, args ...string) (*proc, error) {
	return s.start(name, nil, append([]string{"ip", "netns", "exec", ns}, args...)...)
}

// signal sends sig to p (ignoring a process that has ended).
func (p *proc) signal(sig os.Signal) { p.cmd.Process.Signal(sig) }

// stop kills every process still running and waits for all of them.
func (s *procSet) stop() {
	for _, p := range s.procs {
		p.cmd.Process.Kill()
		p.wait()
	}
	s.procs = nil
}
