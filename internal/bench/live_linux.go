package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

// Live runs, as root, two network namespaces joined by a veth pair: in
// namespace A a collector on loopback, an agent capturing the veth end
// into it, and tcpdump -w capturing the same end; in namespace B
// cfg.Generators generators sending UDP for cfg.Duration, unpaced unless
// cfg.Rate is set. Each round counts what was sent, what arrived at the
// interface, what each capturer wrote and dropped, and the CPU of every
// process. The namespaces are deleted afterwards, on error too.
func Live(ctx context.Context, cfg LiveConfig) ([]LiveMixResult, error) {
	cfg = cfg.withDefaults()
	ns, dir, done, err := vethBench("bench live", "pcslive", cfg.Exe)
	if err != nil {
		return nil, err
	}
	defer done()
	var res []LiveMixResult
	for _, mix := range cfg.Mixes {
		mr := LiveMixResult{Mix: mix}
		for round := range cfg.Rounds {
			r, err := liveRound(ctx, cfg, ns, dir, mix)
			if err != nil {
				return append(res, mr), fmt.Errorf("bench live: mix %s, round %d: %w", mix, round+1, err)
			}
			mr.Runs = append(mr.Runs, r)
			if cfg.Log != nil {
				fmt.Fprintln(cfg.Log, liveRoundLine(mix, round+1, r))
			}
		}
		res = append(res, mr)
	}
	return res, nil
}

// liveFilter is what both capturers keep.
const liveFilter = "udp and dst port 5555"

func liveRound(ctx context.Context, cfg LiveConfig, ns *vethPair, dir string, mix gen.Mix) (LiveRun, error) {
	var r LiveRun
	out, tdFile := filepath.Join(dir, "out"), filepath.Join(dir, "tcpdump.pcap")
	for _, p := range []string{out, tdFile} {
		if err := os.RemoveAll(p); err != nil {
			return r, err
		}
	}
	ps := &procSet{ctx: ctx}
	defer ps.stop()
	const addr = "127.0.0.1:7733"
	coll, err := ps.startIn(ns.A, "collector", cfg.Exe, "collector", "--insecure", "--listen", addr, "--dir", out, "--log-level", "error")
	if err != nil {
		return r, err
	}
	if err := waitListening(ctx, addr, coll); err != nil {
		return r, err
	}
	agent, err := ps.startIn(ns.A, "agent", append([]string{cfg.Exe, "agent", "--insecure", "--collector", addr, "--name", "live",
		"--iface", vethA, "--log-level", "error"}, append(cfg.AgentArgs, liveFilter)...)...)
	if err != nil {
		return r, err
	}
	td, err := ps.startIn(ns.A, "tcpdump", append(append([]string{"tcpdump", "-i", vethA, "-w", tdFile, "-n"}, cfg.TcpdumpArgs...), liveFilter)...)
	if err != nil {
		return r, err
	}
	time.Sleep(time.Second) // both capturing, the agent connected
	rx0, err := rxPackets(ns.A, vethA)
	if err != nil {
		return r, err
	}
	start := time.Now()
	var gens []*proc
	for i := range cfg.Generators {
		g, err := ps.startIn(ns.B, "generator", cfg.Exe, "gen", "udp", "--to", addrA+":5555", "--count", "0",
			"--seconds", strconv.FormatFloat(cfg.Duration.Seconds(), 'f', -1, 64), "--rate", strconv.Itoa(cfg.Rate),
			"--mix", string(mix), "--stream", strconv.Itoa(i+1))
		if err != nil {
			return r, err
		}
		gens = append(gens, g)
	}
	genUse := ProcUsage{Name: "generators"}
	for _, g := range gens {
		if err := g.wait(); err != nil {
			return r, fmt.Errorf("generator: %w: %s", err, g.stderr.String())
		}
		n, err := parseGenSent(g.stdout.String())
		if err != nil {
			return r, err
		}
		r.Sent += n
		genUse.User += g.usage.User
		genUse.Sys += g.usage.Sys
		genUse.MaxRSS = max(genUse.MaxRSS, g.usage.MaxRSS)
	}
	r.Sending = time.Since(start)
	rx1, err := rxPackets(ns.A, vethA)
	if err != nil {
		return r, err
	}
	r.IfRx = rx1 - rx0
	// The last packets through both rings: tcpdump's ring hands a
	// partly filled block over only after its 1 s timeout, and it
	// does not read the ring again after SIGINT.
	time.Sleep(1500 * time.Millisecond)
	agent.signal(os.Interrupt)
	td.signal(os.Interrupt)
	if err := agent.wait(); err != nil {
		return r, fmt.Errorf("agent: %w: %s", err, agent.stderr.String())
	}
	if err := td.wait(); err != nil {
		return r, fmt.Errorf("tcpdump: %w: %s", err, td.stderr.String())
	}
	coll.signal(syscall.SIGTERM)
	if err := coll.wait(); err != nil {
		return r, fmt.Errorf("collector: %w: %s", err, coll.stderr.String())
	}
	sum, err := parseAgentSummary(agent.stdout.String())
	if err != nil {
		return r, err
	}
	if sum.Unacked != 0 {
		return r, fmt.Errorf("agent: %d packets not acknowledged at exit: %s", sum.Unacked, agent.stdout.String())
	}
	tds, err := parseTcpdumpStats(td.stderr.String())
	if err != nil {
		return r, err
	}
	r.Agent.KernelDrops, r.Agent.AgentDrops, r.Tcpdump.KernelDrops = sum.KernelDrops, sum.Dropped, tds.KernelDrops
	files, err := filepath.Glob(filepath.Join(out, "live", "*.pcapng"))
	if err != nil {
		return r, err
	}
	n, err := countPackets(files...)
	if err != nil {
		return r, err
	}
	r.Agent.InFile = uint64(n)
	if n, err = countPackets(tdFile); err != nil {
		return r, err
	}
	r.Tcpdump.InFile = uint64(n)
	r.Procs = []ProcUsage{agent.usage, coll.usage, td.usage, genUse}
	return r, nil
}

// rxPackets returns the packets interface ifName in namespace ns has
// received (its rx_packets counter, as seen inside the namespace).
func rxPackets(ns, ifName string) (uint64, error) {
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/"+ifName+"/statistics/rx_packets").Output()
	if err != nil {
		return 0, fmt.Errorf("reading rx_packets of %s in %s: %w", ifName, ns, err)
	}
	return strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
}
