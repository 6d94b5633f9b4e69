package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// faninCollector is the collector side of Fanin: in this process
// (Core and Server) or a child process (FaninConfig.CollectorCommand).
type faninCollector interface {
	addr() string
	// cpu returns the CPU time the collector used so far.
	cpu() (user, sys time.Duration, err error)
	// mem returns its VmHWM and VmRSS.
	mem() (hwm, rss int64)
	// profile writes a CPU profile of the next d to w (a child: through
	// its /debug/pprof); nil if this process profiles itself.
	profile(ctx context.Context, d time.Duration, w io.Writer) error
	// stop stops the collector (files closed) and returns what it wrote.
	stop() (collector.Summary, error)
}

// procCollector is a "pcapsync collector" child process.
type procCollector struct {
	cmd     *exec.Cmd
	listen  string
	metrics string
	stdout  bytes.Buffer
	stderr  *lineLog
}

// startProcCollector starts argv (a "pcapsync collector" command line)
// with the flags Fanin needs and waits until it listens.
func startProcCollector(ctx context.Context, argv []string, dir string, agents int) (*procCollector, error) {
	// The ports are held until the collector listens on them (then it
	// holds them).
	listen, releaseListen, err := freeAddr()
	if err != nil {
		return nil, err
	}
	defer releaseListen()
	metrics, releaseMetrics, err := freeAddr()
	if err != nil {
		return nil, err
	}
	defer releaseMetrics()
	args := append(argv[1:len(argv):len(argv)], "--listen", listen, "--dir", dir, "--insecure", "--fsync", "never",
		"--max-conns", strconv.Itoa(agents+64), "--max-conns-per-source", strconv.Itoa(agents+64), "--summary", "json", "--metrics", metrics, "--pprof")
	p := &procCollector{listen: listen, metrics: metrics, stderr: newLineLog("collector listening")}
	p.cmd = exec.Command(argv[0], args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the collector: %w", err)
	}
	select {
	case <-p.stderr.found:
		return p, nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()
	return nil, fmt.Errorf("the collector did not listen within 30s; stderr:\n%s", p.stderr.tail())
}

func (p *procCollector) addr() string { return p.listen }

func (p *procCollector) cpu() (user, sys time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0, 0, err
	}
	// Fields after the command name (which may hold spaces): state is
	// field 3, utime 14 and stime 15, in clock ticks (USER_HZ, 100).
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, 0, errors.New("short /proc/PID/stat")
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u) * 10 * time.Millisecond, time.Duration(s) * 10 * time.Millisecond, nil
}

func (p *procCollector) mem() (hwm, rss int64) {
	hwm, rss, _ = procMem(strconv.Itoa(p.cmd.Process.Pid))
	return hwm, rss
}

func (p *procCollector) profile(ctx context.Context, d time.Duration, w io.Writer) error {
	secs := max(1, int(d.Round(time.Second)/time.Second))
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.metrics, secs), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("collector CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("collector CPU profile: %s", resp.Status)
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func (p *procCollector) stop() (collector.Summary, error) {
	var s collector.Summary
	p.cmd.Process.Signal(syscall.SIGTERM)
	werr := p.cmd.Wait()
	if err := json.Unmarshal(p.stdout.Bytes(), &s); err != nil {
		return s, errors.Join(werr, fmt.Errorf("reading the collector's summary: %w; stderr:\n%s", err, p.stderr.tail()))
	}
	if werr != nil {
		return s, fmt.Errorf("collector: %w; stderr:\n%s", werr, p.stderr.tail())
	}
	return s, nil
}

// freeAddr returns a loopback address whose port is held for this
// process until release (freeport.Reserve).
func freeAddr() (addr string, release func(), err error) {
	p, release, err := freeport.Reserve()
	if err != nil {
		return "", nil, err
	}
	return "127.0.0.1:" + strconv.Itoa(p), release, nil
}

// lineLog keeps the last lines written to it and closes found at the
// first line holding want.
type lineLog struct {
	want  string
	found chan struct{}
	buf   []byte
	lines []string
}

func newLineLog(want string) *lineLog { return &lineLog{want: want, found: make(chan struct{})} }

func (l *lineLog) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.buf[:i])
		l.buf = l.buf[i+1:]
		if l.want != "" && strings.Contains(line, l.want) {
			close(l.found)
			l.want = ""
		}
		l.lines = append(l.lines, line)
		if len(l.lines) > 20 {
			l.lines = l.lines[1:]
		}
	}
}

// tail returns the last lines (read it after the process ended).
func (l *lineLog) tail() string {
	var b strings.Builder
	w := bufio.NewWriter(&b)
	for _, s := range l.lines {
		fmt.Fprintln(w, s)
	}
	w.Flush()
	return b.String()
}

// localCollector is Core and Server in this process, their goroutines
// labelled side=collector.
type localCollector struct {
	core     *collector.Core
	ln       net.Listener
	stopSrv  func()
	served   chan error
	stopTick func()
	ticked   chan struct{}
}

func startLocalCollector(cfg FaninConfig, dir string) (*localCollector, error) {
	core, err := collector.NewCore(collector.Config{
		Store:    store.Config{Dir: dir, Fsync: store.FsyncNever},
		Insecure: true,
		MaxConns: cfg.Agents + 64, MaxConnsPerSource: cfg.Agents + 64, // every agent on loopback
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		core.Close()
		return nil, err
	}
	c := &localCollector{core: core, ln: ln, served: make(chan error, 1), ticked: make(chan struct{})}
	tickCtx, stopTick := context.WithCancel(context.Background())
	collectorSide := pprof.Labels("side", "collector")
	go pprof.Do(tickCtx, collectorSide, func(ctx context.Context) { core.Run(ctx); close(c.ticked) })
	srvCtx, stopSrv := context.WithCancel(context.Background())
	go pprof.Do(srvCtx, collectorSide, func(ctx context.Context) { c.served <- collector.NewServer(core).Serve(ctx, ln) })
	c.stopSrv, c.stopTick = stopSrv, stopTick
	return c, nil
}

func (c *localCollector) addr() string { return c.ln.Addr().String() }

// cpu is this process's: the agents' too.
func (c *localCollector) cpu() (user, sys time.Duration, err error) { return cpuTimes() }

func (c *localCollector) mem() (hwm, rss int64) {
	hwm, rss, _ = memStatus()
	return hwm, rss
}

func (c *localCollector) profile(context.Context, time.Duration, io.Writer) error { return nil }

func (c *localCollector) stop() (collector.Summary, error) {
	c.stopSrv()
	serr := <-c.served
	c.stopTick()
	<-c.ticked
	err := errors.Join(serr, c.core.Close())
	return c.core.Summary(), err
}
