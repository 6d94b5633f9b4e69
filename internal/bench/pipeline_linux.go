package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// Pipeline replays a generated file of cfg.Packets packets per mix
// through three methods, every process its own (see methodDesc), for
// cfg.Rounds rounds with the methods alternating, and checks that every
// method delivered every packet. Everything runs on loopback and in a
// work directory; nothing needs root.
func Pipeline(ctx context.Context, cfg PipelineConfig) ([]MixResult, error) {
	cfg = cfg.withDefaults()
	if cfg.Exe == "" {
		return nil, errors.New("bench pipeline: PipelineConfig.Exe (the pcapsync binary) is required")
	}
	type method struct {
		name string
		run  func(context.Context, pipelineEnv) (PipelineRun, error)
	}
	methods := []method{{MethodPcapsync, runPcapsync}, {MethodPoIP, runPoIP}, {MethodRsync, runTcpdumpRsync}, {MethodFloor, runFloor}}
	tools := []string{"tcpdump", "nc", "rsync"}
	if cfg.vs() {
		methods = []method{{MethodPcapsync, runPcapsync}, {MethodPcapsyncVs, func(ctx context.Context, env pipelineEnv) (PipelineRun, error) {
			if len(env.cfg.VsCollectorArgs) > 0 {
				env.cfg.CollectorArgs = env.cfg.VsCollectorArgs
			}
			if env.cfg.VsExe != "" {
				env.cfg.Exe = env.cfg.VsExe
			}
			return runPcapsync(ctx, env)
		}}, {MethodFloor, runFloor}}
		tools = nil
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("bench pipeline: %s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	if cfg.MemoryLimit > 0 {
		cg, err := enterMemoryCgroup(cfg.MemoryLimit)
		if err != nil {
			return nil, fmt.Errorf("bench pipeline: --memory-limit: %w", err)
		}
		defer func() {
			if err := cg.leave(); err != nil && cfg.Log != nil {
				fmt.Fprintln(cfg.Log, "bench pipeline:", err)
			}
		}()
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "pcapsync-pipeline")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	var res []MixResult
	for _, mix := range cfg.Mixes {
		env := pipelineEnv{cfg: cfg, dir: dir, in: filepath.Join(dir, "in-"+string(mix)+".pcap")}
		if out, err := exec.CommandContext(ctx, cfg.Exe, "gen", "file", "--out", env.in,
			"--count", strconv.Itoa(cfg.Packets), "--mix", string(mix)).CombinedOutput(); err != nil {
			return res, fmt.Errorf("bench pipeline: generating the input: %w: %s", err, out)
		}
		size, err := warm(env.in)
		if err != nil {
			return res, fmt.Errorf("bench pipeline: %w", err)
		}
		mr := MixResult{Mix: mix, Packets: cfg.Packets, InputBytes: size}
		for _, m := range methods {
			mr.Methods = append(mr.Methods, MethodResult{Name: m.name})
		}
		for round := range cfg.Rounds {
			for k := range methods {
				i := (round + k) % len(methods)
				r, err := methods[i].run(ctx, env)
				if err != nil {
					res = append(res, mr)
					return res, fmt.Errorf("bench pipeline: mix %s, round %d, %s: %w", mix, round+1, methods[i].name, err)
				}
				mr.Methods[i].Runs = append(mr.Methods[i].Runs, r)
				if cfg.Log != nil {
					fmt.Fprintln(cfg.Log, roundLine(mix, round+1, methods[i].name, cfg.Packets, r))
				}
			}
		}
		res = append(res, mr)
	}
	return res, nil
}

// pipelineEnv is what every method's round gets.
type pipelineEnv struct {
	cfg PipelineConfig
	dir string // work directory
	in  string // input file, in the page cache
}

// freshRound removes the output of the last round at out and returns a
// process set for this one (the caller stops it) and a loopback
// address for its listener.
func freshRound(ctx context.Context, out string) (*procSet, string, error) {
	if err := os.RemoveAll(out); err != nil {
		return nil, "", err
	}
	addr, err := freeLoopbackAddr()
	if err != nil {
		return nil, "", err
	}
	return &procSet{ctx: ctx}, addr, nil
}

// runPcapsync: a collector, then an agent replaying the file into it,
// timed from the agent's start to its exit with everything acknowledged.
func runPcapsync(ctx context.Context, env pipelineEnv) (PipelineRun, error) {
	out := filepath.Join(env.dir, "pcapsync-out")
	ps, addr, err := freshRound(ctx, out)
	if err != nil {
		return PipelineRun{}, err
	}
	defer ps.stop()
	args := append([]string{env.cfg.Exe, "collector", "--insecure", "--listen", addr, "--dir", out, "--log-level", "error"}, env.cfg.CollectorArgs...)
	coll, err := ps.start("collector", nil, args...)
	if err != nil {
		return PipelineRun{}, err
	}
	if err := waitListening(ctx, addr, coll); err != nil {
		return PipelineRun{}, err
	}
	start := time.Now()
	ag, err := ps.start("agent", nil, append([]string{env.cfg.Exe, "agent", "--insecure", "--collector", addr, "--name", "bench", "--read", env.in, "--log-level", "error"}, env.cfg.AgentArgs...)...)
	if err != nil {
		return PipelineRun{}, err
	}
	err = ag.wait()
	wall := time.Since(start)
	if err != nil {
		return PipelineRun{}, fmt.Errorf("agent: %w: %s", err, ag.stderr.String())
	}
	sum, err := parseAgentSummary(ag.stdout.String())
	if err != nil {
		return PipelineRun{}, err
	}
	if sum.Acked != uint64(env.cfg.Packets) {
		return PipelineRun{}, fmt.Errorf("agent: not every packet acknowledged: %s", strings.TrimSpace(ag.stdout.String()))
	}
	coll.signal(syscall.SIGTERM)
	if err := coll.wait(); err != nil {
		return PipelineRun{}, fmt.Errorf("collector: %w: %s", err, coll.stderr.String())
	}
	files, err := outputFiles(filepath.Join(out, "bench"))
	if err != nil {
		return PipelineRun{}, err
	}
	check := checkPackets
	if retains(env.cfg.CollectorArgs) {
		check = func(want int, files ...string) error { return checkRetained(want, coll.stdout.String(), files...) }
	}
	if err := check(env.cfg.Packets, files...); err != nil {
		return PipelineRun{}, fmt.Errorf("%w; agent: %s; collector: %s%s", err, strings.TrimSpace(ag.stdout.String()), coll.stdout.String(), coll.stderr.String())
	}
	cu := coll.usage
	if cu.Bytes, err = dirSize(out); err != nil {
		return PipelineRun{}, err
	}
	return PipelineRun{Wall: wall, Procs: []ProcUsage{ag.usage, cu}}, nil
}

// runPoIP: nc -l > file, then tcpdump -r F -w - piped into nc -N, timed
// from tcpdump's start until the receiver exits.
func runPoIP(ctx context.Context, env pipelineEnv) (PipelineRun, error) {
	file := filepath.Join(env.dir, "poip.pcap")
	f, err := os.Create(file)
	if err != nil {
		return PipelineRun{}, err
	}
	defer f.Close()
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	addr, err := freeLoopbackAddr()
	if err != nil {
		return PipelineRun{}, err
	}
	host, port, _ := net.SplitHostPort(addr)
	recv, err := ps.start("nc receiver", func(c *exec.Cmd) { c.Stdout = f }, "nc", "-l", host, port)
	if err != nil {
		return PipelineRun{}, err
	}
	f.Close()
	if err := waitListening(ctx, addr, recv); err != nil {
		return PipelineRun{}, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return PipelineRun{}, err
	}
	start := time.Now()
	td, err := ps.start("tcpdump -r", func(c *exec.Cmd) { c.Stdout = pw }, "tcpdump", "-r", env.in, "-w", "-")
	pw.Close()
	if err != nil {
		pr.Close()
		return PipelineRun{}, err
	}
	snd, err := ps.start("nc sender", func(c *exec.Cmd) { c.Stdin = pr }, "nc", "-N", host, port)
	pr.Close()
	if err != nil {
		return PipelineRun{}, err
	}
	// A failed sender would leave the receiver waiting: end it too.
	sent := make(chan error, 1)
	go func() {
		err := errors.Join(td.wait(), snd.wait())
		if err != nil {
			recv.cmd.Process.Kill()
		}
		sent <- err
	}()
	err = recv.wait()
	wall := time.Since(start)
	if err := errors.Join(<-sent, err); err != nil {
		return PipelineRun{}, fmt.Errorf("%w: tcpdump: %s; nc sender: %s; nc receiver: %s", err, td.stderr.String(), snd.stderr.String(), recv.stderr.String())
	}
	if err := checkPackets(env.cfg.Packets, file); err != nil {
		return PipelineRun{}, err
	}
	ru := recv.usage
	if ru.Bytes, err = fileSize(file); err != nil {
		return PipelineRun{}, err
	}
	return PipelineRun{Wall: wall, Procs: []ProcUsage{td.usage, snd.usage, ru}}, nil
}

// runTcpdumpRsync: tcpdump -r F -w LOCAL, then rsync -a LOCAL DEST/,
// each timed; the total is the delivery delay.
func runTcpdumpRsync(ctx context.Context, env pipelineEnv) (PipelineRun, error) {
	local := filepath.Join(env.dir, "tcpdump-w.pcap")
	dest := filepath.Join(env.dir, "rsync-dest")
	for _, p := range []string{local, dest} {
		if err := os.RemoveAll(p); err != nil {
			return PipelineRun{}, err
		}
	}
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	var procs []ProcUsage
	for _, step := range []struct {
		name string
		args []string
		out  string
	}{
		{"tcpdump -w", []string{"tcpdump", "-r", env.in, "-w", local}, local},
		{"rsync", []string{"rsync", "-a", local, dest + "/"}, filepath.Join(dest, filepath.Base(local))},
	} {
		start := time.Now()
		p, err := ps.start(step.name, nil, step.args...)
		if err != nil {
			return PipelineRun{}, err
		}
		if err := p.wait(); err != nil {
			return PipelineRun{}, fmt.Errorf("%s: %w: %s", step.name, err, p.stderr.String())
		}
		u := p.usage
		u.Wall = time.Since(start)
		if u.Bytes, err = fileSize(step.out); err != nil {
			return PipelineRun{}, err
		}
		procs = append(procs, u)
	}
	if err := checkPackets(env.cfg.Packets, filepath.Join(dest, filepath.Base(local))); err != nil {
		return PipelineRun{}, err
	}
	return PipelineRun{Wall: procs[0].Wall + procs[1].Wall, Procs: procs}, nil
}

// runFloor: the copy floor's receiver (listening), then its sender,
// timed from the sender's start until the receiver exits; the file
// written must be the input, byte for byte in size and packets.
func runFloor(ctx context.Context, env pipelineEnv) (PipelineRun, error) {
	self, err := os.Executable()
	if err != nil {
		return PipelineRun{}, err
	}
	file := filepath.Join(env.dir, "floor.pcap")
	ps, addr, err := freshRound(ctx, file)
	if err != nil {
		return PipelineRun{}, err
	}
	defer ps.stop()
	end := func(spec string) func(*exec.Cmd) {
		return func(c *exec.Cmd) { c.Env = append(os.Environ(), floorEnv+"="+spec) }
	}
	recv, err := ps.start("copy receiver", end("recv "+addr+" "+file), self)
	if err != nil {
		return PipelineRun{}, err
	}
	if err := waitListening(ctx, addr, recv); err != nil {
		return PipelineRun{}, err
	}
	start := time.Now()
	snd, err := ps.start("copy sender", end("send "+addr+" "+env.in), self)
	if err != nil {
		return PipelineRun{}, err
	}
	sent := make(chan error, 1)
	go func() {
		err := snd.wait()
		if err != nil {
			recv.cmd.Process.Kill() // else it waits for a connection
		}
		sent <- err
	}()
	err = recv.wait()
	wall := time.Since(start)
	if err := errors.Join(<-sent, err); err != nil {
		return PipelineRun{}, fmt.Errorf("%w: sender: %s; receiver: %s", err, snd.stderr.String(), recv.stderr.String())
	}
	ru := recv.usage
	if ru.Bytes, err = fileSize(file); err != nil {
		return PipelineRun{}, err
	}
	if in, err := fileSize(env.in); err != nil || in != ru.Bytes {
		return PipelineRun{}, fmt.Errorf("copy floor wrote %d bytes of the input's %d (%v)", ru.Bytes, in, err)
	}
	if err := checkPackets(env.cfg.Packets, file); err != nil {
		return PipelineRun{}, err
	}
	return PipelineRun{Wall: wall, Procs: []ProcUsage{snd.usage, ru}}, nil
}

// warm reads path once (into the page cache) and returns its size.
func warm(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return io.Copy(io.Discard, f)
}

// dirSize returns the total size of the regular files under dir.
func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// outputFiles lists the collector's files in dir: plain, gzip and zstd
// (--file-compress).
func outputFiles(dir string) ([]string, error) {
	var files []string
	for _, ext := range []string{"", ".gz", ".zst"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.pcapng"+ext))
		if err != nil {
			return nil, err
		}
		files = append(files, m...)
	}
	return files, nil
}

// countPackets returns the packets in pcap or pcapng files, compressed
// or not (pcapfile.Open).
func countPackets(files ...string) (int, error) {
	n := 0
	for _, path := range files {
		f, err := pcapfile.Open(path)
		if err != nil {
			return n, err
		}
		r, err := pcapfile.NewReader(f, nil)
		if err != nil {
			f.Close()
			return n, fmt.Errorf("%s: %w", path, err)
		}
		var p pcapfile.Packet
		for err = r.ReadInto(&p); err == nil; err = r.ReadInto(&p) {
			n++
		}
		f.Close()
		if err != io.EOF {
			return n, fmt.Errorf("%s: %w", path, err)
		}
	}
	return n, nil
}

// checkPackets fails unless files hold want packets in all.
func checkPackets(want int, files ...string) error {
	n, err := countPackets(files...)
	if err != nil {
		return err
	}
	if n != want {
		return fmt.Errorf("%d packets in %v, want %d", n, files, want)
	}
	return nil
}

// retains reports whether collector flags turn on a retention rule that
// deletes files during the run (--retain-size, --retain-age,
// --retain-agent-size; --retain-free only when the disk is that full).
func retains(collectorArgs []string) bool {
	for _, a := range collectorArgs {
		if strings.HasPrefix(a, "--retain-") && !strings.HasPrefix(a, "--retain-free") {
			return true
		}
	}
	return false
}

var collectorPacketsRE = regexp.MustCompile(`pcapsync collector: sessions \d+, .*, packets (\d+), .*, file errors (\d+),`)

// checkRetained is checkPackets for a collector whose retention deletes
// files as it goes: the collector's summary must count want packets
// written and no file error, and the files left must hold at most want
// packets, every one readable.
func checkRetained(want int, collectorStdout string, files ...string) error {
	m := collectorPacketsRE.FindStringSubmatch(collectorStdout)
	if m == nil {
		return fmt.Errorf("no collector summary line in %q", collectorStdout)
	}
	if m[1] != strconv.Itoa(want) || m[2] != "0" {
		return fmt.Errorf("collector wrote %s packets with %s file errors, want %d and 0", m[1], m[2], want)
	}
	n, err := countPackets(files...)
	if err != nil {
		return err
	}
	if n > want {
		return fmt.Errorf("%d packets in %v, more than the %d sent", n, files, want)
	}
	return nil
}

// freeLoopbackAddr returns 127.0.0.1:PORT with PORT free now, for a
// process the bench starts to listen on. The port is picked at random
// below the kernel's ephemeral range (ip_local_port_range): a port that
// listening on port 0 hands out is one an outgoing connection of
// another process (a Kafka client, a parallel test) may take before the
// bench's process binds it.
func freeLoopbackAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	for range 50 {
		if low-1024 < 1000 {
			break
		}
		port := 1024 + rand.IntN(low-1024)
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			addr := l.Addr().String()
			l.Close()
			return addr, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitListening waits until a socket listens on addr (127.0.0.1:PORT)
// in p's network namespace, read from /proc/PID/net/tcp so as not to
// connect to it: nc -l takes one connection only. It fails when p exits
// first or after 10 s.
func waitListening(ctx context.Context, addr string, p *proc) error {
	_, port, _ := net.SplitHostPort(addr)
	pn, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	want := fmt.Sprintf("0100007F:%04X", pn)
	exited := make(chan struct{})
	go func() { p.wait(); close(exited) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if listening(p.cmd.Process.Pid, want) {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("%s exited before listening on %s: %s", p.name, addr, p.stderr.String())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after 10 s", p.name, addr)
		}
	}
}

// listening reports whether the network namespace of process pid has a
// listening TCP socket whose local address is local ("0100007F:1F90").
func listening(pid int, local string) bool {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/net/tcp")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 3 && fs[1] == local && fs[3] == "0A" {
			return true
		}
	}
	return false
}
