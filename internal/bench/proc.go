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

	once    sync.Once
	err     error
	usage   ProcUsage
	stopRSS chan struct{} // closed by wait: the sampler stops
	rss     chan int64    // the sampler's result
}

// ProcUsage is what one process of a bench used. CPU comes from wait4's
// rusage, which covers the process and every child it reaped (rsync's
// forked receiver and generator, for one: checked against /proc while
// rsync ran). MaxRSS is the largest VmHWM of the process and its
// descendants, sampled every rssEvery while it runs; not wait4's
// ru_maxrss, which is useless for a child of a Go program: Go starts
// children with vfork (CLONE_VM), and exec records the hiwater RSS of
// the mm it replaces, the parent's, in the child's ru_maxrss.
type ProcUsage struct {
	Name      string
	User, Sys time.Duration
	MaxRSS    int64         // bytes; growth in the last rssEvery of a process is missed, 0 if it ended before the first sample
	Wall      time.Duration // when the process was timed on its own; else 0
	Bytes     int64         // bytes it wrote to disk, when counted; else 0
	// IO is what the process and the children it reaped read, from
	// /proc/PID/io once it has exited and before it is reaped (zero
	// where /proc is not there).
	IO ProcIO
}

// ProcIO is a process's reads as /proc/PID/io counts them.
type ProcIO struct {
	RChar     int64 // bytes read by read(2) and its kin, from files, pipes and sockets, page cache hits included
	ReadBytes int64 // bytes the process caused to be fetched from storage (page cache misses)
}

// CPU returns user plus system time.
func (u ProcUsage) CPU() time.Duration { return u.User + u.Sys }

// wait waits for the process once and records its usage; later calls
// return the first call's error. Safe for concurrent use.
func (p *proc) wait() error {
	p.once.Do(func() {
		io := exitIO(p.cmd.Process.Pid)
		p.err = p.cmd.Wait()
		close(p.stopRSS)
		if st := p.cmd.ProcessState; st != nil {
			p.usage = ProcUsage{Name: p.name, User: st.UserTime(), Sys: st.SystemTime(), MaxRSS: <-p.rss, IO: io}
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
	p.stopRSS, p.rss = make(chan struct{}), make(chan int64, 1)
	go p.sampleRSS()
	return p, nil
}

// rssEvery is how often a proc's VmHWM is sampled.
const rssEvery = 5 * time.Millisecond

// sampleRSS samples the process tree's VmHWM until wait stops it
// (VmHWM only grows, so the last sample is the peak but for the growth
// after it), and sends the largest seen on p.rss.
func (p *proc) sampleRSS() {
	var peak int64
	t := time.NewTicker(rssEvery)
	defer t.Stop()
	for {
		peak = max(peak, treeHWM(p.cmd.Process.Pid))
		select {
		case <-p.stopRSS:
			p.rss <- peak
			return
		case <-t.C:
		}
	}
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
