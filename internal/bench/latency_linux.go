package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// Latency runs, as root, two network namespaces joined by a veth pair:
// in namespace A a collector, an agent capturing the veth end, and
// tcpdump -U -w capturing the same end; in namespace B a generator
// sending UDP at cfg.Rate. It tails the collector's file and tcpdump's
// file every millisecond and records, for every packet, the time from
// its capture timestamp to when it could be read from the file. Traffic
// stays inside the two namespaces, which are deleted afterwards.
func Latency(ctx context.Context, cfg LatencyConfig) (LatencyResult, error) {
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	if cfg.Duration == 0 {
		cfg.Duration = 10 * time.Second
	}
	if cfg.Flush == 0 {
		cfg.Flush = 50 * time.Millisecond
	}
	res := LatencyResult{Flush: cfg.Flush, PollEvery: time.Millisecond}
	if os.Geteuid() != 0 {
		return res, errors.New("bench latency: needs root (network namespaces, packet capture)")
	}
	for _, tool := range []string{"ip", "tcpdump"} {
		if _, err := exec.LookPath(tool); err != nil {
			return res, fmt.Errorf("bench latency: %s not installed (scripts/deps.sh installs it)", tool)
		}
	}
	exe := cfg.Exe
	if exe == "" {
		return res, errors.New("bench latency: LatencyConfig.Exe (the pcapsync binary) is required")
	}
	tag := strconv.Itoa(os.Getpid())
	nsA, nsB := "pcsbench-"+tag+"-a", "pcsbench-"+tag+"-b"
	defer exec.Command("ip", "netns", "del", nsA).Run()
	defer exec.Command("ip", "netns", "del", nsB).Run()
	for _, args := range [][]string{
		{"netns", "add", nsA}, {"netns", "add", nsB},
		{"link", "add", "vA", "netns", nsA, "type", "veth", "peer", "name", "vB", "netns", nsB},
		{"-n", nsA, "addr", "add", "198.18.0.1/30", "dev", "vA"},
		{"-n", nsB, "addr", "add", "198.18.0.2/30", "dev", "vB"},
		{"-n", nsA, "link", "set", "vA", "up"}, {"-n", nsB, "link", "set", "vB", "up"},
		{"-n", nsA, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return res, fmt.Errorf("bench latency: ip %v: %w: %s", args, err, out)
		}
	}
	dir, err := os.MkdirTemp("", "pcapsync-latency")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			p.Process.Kill()
			p.Wait()
		}
	}()
	start := func(ns string, stderr *bytes.Buffer, args ...string) (*exec.Cmd, error) {
		cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns}, args...)...)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		procs = append(procs, cmd)
		return cmd, nil
	}
	var collLog, agentLog, tdLog bytes.Buffer // read only after the processes ended
	if _, err := start(nsA, &collLog, exe, "collector", "--insecure", "--listen", "127.0.0.1:7733", "--dir", filepath.Join(dir, "out"), "--log-level", "error"); err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond)
	agent, err := start(nsA, &agentLog, exe, "agent", "--insecure", "--collector", "127.0.0.1:7733", "--name", "lat",
		"--iface", "vA", "--flush-interval", cfg.Flush.String(), "--log-level", "error", "udp and dst port 5555")
	if err != nil {
		return res, err
	}
	tdFile := filepath.Join(dir, "tcpdump.pcap")
	td, err := start(nsA, &tdLog, "tcpdump", "-i", "vA", "-U", "-w", tdFile, "--time-stamp-precision=nano", "-n", "udp and dst port 5555")
	if err != nil {
		return res, err
	}
	time.Sleep(time.Second) // both capturing, the agent connected
	res.Sent = int(cfg.Duration.Seconds() * float64(cfg.Rate))
	gen, err := start(nsB, &bytes.Buffer{}, exe, "gen", "udp", "--to", "198.18.0.1:5555", "--count", strconv.Itoa(res.Sent), "--rate", strconv.Itoa(cfg.Rate))
	if err != nil {
		return res, err
	}
	ours := &tailer{}
	theirs := &tailer{}
	done := make(chan error, 1)
	go func() { done <- gen.Wait() }()
	tick := time.NewTicker(res.PollEvery)
	defer tick.Stop()
	deadline := time.Now().Add(cfg.Duration + 30*time.Second)
	var genErr error
	genDone := false
	var quietSince time.Time
	for {
		select {
		case genErr = <-done:
			genDone = true
			quietSince = time.Now()
		case <-tick.C:
			if ours.path == "" {
				if m, _ := filepath.Glob(filepath.Join(dir, "out", "lat", "*.part")); len(m) == 1 {
					ours.path = m[0]
				}
			}
			if theirs.path == "" {
				theirs.path = tdFile
			}
			// The time of the read, not the tick's: a late tick would
			// date packets read now before their capture.
			ours.poll(time.Now())
			theirs.poll(time.Now())
		}
		if genDone && time.Since(quietSince) > cfg.Flush+time.Second || time.Now().After(deadline) {
			break
		}
	}
	if genErr != nil {
		return res, fmt.Errorf("bench latency: generator: %w", genErr)
	}
	res.Pcapsync, res.Tcpdump = ours.lat, theirs.lat
	slices.Sort(res.Pcapsync)
	slices.Sort(res.Tcpdump)
	agent.Process.Signal(os.Interrupt)
	td.Process.Signal(os.Interrupt)
	agent.Wait()
	td.Wait()
	if ours.err != nil || theirs.err != nil {
		return res, fmt.Errorf("bench latency: reading the files: %w", errors.Join(ours.err, theirs.err))
	}
	if len(res.Pcapsync) == 0 || len(res.Tcpdump) == 0 {
		return res, fmt.Errorf("bench latency: no packets read (pcapsync %d, tcpdump %d); agent: %s; tcpdump: %s",
			len(res.Pcapsync), len(res.Tcpdump), agentLog.String(), tdLog.String())
	}
	return res, nil
}
