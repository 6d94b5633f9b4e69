package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	ns, dir, cleanup, err := vethBench("bench latency", "pcsbench", cfg.Exe)
	if err != nil {
		return res, err
	}
	defer cleanup()
	exe := cfg.Exe
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	// The tailer follows one file: none cut at the top of an hour.
	if _, err := ps.startIn(ns.A, "collector", append([]string{exe, "collector", "--insecure", "--listen", "127.0.0.1:7733", "--dir", filepath.Join(dir, "out"), "--log-level", "error",
		"--rotate-interval", "0"}, cfg.CollectorArgs...)...); err != nil {
		return res, err
	}
	time.Sleep(300 * time.Millisecond)
	agent, err := ps.startIn(ns.A, "agent", exe, "agent", "--insecure", "--collector", "127.0.0.1:7733", "--name", "lat",
		"--iface", vethA, "--flush-interval", cfg.Flush.String(), "--log-level", "error", "udp and dst port 5555")
	if err != nil {
		return res, err
	}
	tdFile := filepath.Join(dir, "tcpdump.pcap")
	td, err := ps.startIn(ns.A, "tcpdump", "tcpdump", "-i", vethA, "-U", "-w", tdFile, "--time-stamp-precision=nano", "-n", "udp and dst port 5555")
	if err != nil {
		return res, err
	}
	time.Sleep(time.Second) // both capturing, the agent connected
	res.Sent = int(cfg.Duration.Seconds() * float64(cfg.Rate))
	gen, err := ps.startIn(ns.B, "generator", exe, "gen", "udp", "--to", addrA+":5555", "--count", strconv.Itoa(res.Sent), "--rate", strconv.Itoa(cfg.Rate))
	if err != nil {
		return res, err
	}
	ours := &tailer{}
	theirs := &tailer{}
	done := make(chan error, 1)
	go func() { done <- gen.wait() }()
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
				if m, _ := filepath.Glob(filepath.Join(dir, "out", "lat", "*.pcapng.part")); len(m) == 1 {
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
	agent.signal(os.Interrupt)
	td.signal(os.Interrupt)
	agent.wait()
	td.wait()
	if ours.err != nil || theirs.err != nil {
		return res, fmt.Errorf("bench latency: reading the files: %w", errors.Join(ours.err, theirs.err))
	}
	if len(res.Pcapsync) == 0 || len(res.Tcpdump) == 0 {
		return res, fmt.Errorf("bench latency: no packets read (pcapsync %d, tcpdump %d); agent: %s; tcpdump: %s",
			len(res.Pcapsync), len(res.Tcpdump), agent.stderr.String(), td.stderr.String())
	}
	return res, nil
}
