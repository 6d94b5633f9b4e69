package bench

import (
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
)

// LiveConfig describes a live capture comparison. The zero value of
// each field but Exe means its default.
type LiveConfig struct {
	Exe         string        // the pcapsync binary to run; required
	Duration    time.Duration // sending time per round; 0 means 5s
	Rounds      int           // 0 means 3
	Mixes       []gen.Mix     // 0 means 64 and imix
	Rate        int           // packets per second per generator; 0 means as fast as it can
	Generators  int           // generator processes; 0 means 1
	AgentArgs   []string      // more agent flags
	TcpdumpArgs []string      // more tcpdump flags (e.g. -B 32768)
	Log         io.Writer     // every round's figures as they come; nil means none
}

func (c LiveConfig) withDefaults() LiveConfig {
	if c.Duration == 0 {
		c.Duration = 5 * time.Second
	}
	if c.Rounds == 0 {
		c.Rounds = 3
	}
	if len(c.Mixes) == 0 {
		c.Mixes = []gen.Mix{gen.Mix64, gen.MixIMIX}
	}
	if c.Generators == 0 {
		c.Generators = runtime.NumCPU()
	}
	return c
}

// LiveCapture is what one capturer got in a round.
type LiveCapture struct {
	InFile      uint64 // packets in its output file
	KernelDrops uint64 // the kernel's count of packets its ring or buffer had no room for
	AgentDrops  uint64 // the agent only: dropped because its queue was full
}

// Drops returns every packet the capturer lost that it counted.
func (c LiveCapture) Drops() uint64 { return c.KernelDrops + c.AgentDrops }

// LiveRun is one round.
type LiveRun struct {
	Sent    uint64        // datagrams the generators sent
	Sending time.Duration // from the first generator's start to the last one's end
	IfRx    uint64        // packets the capture interface received (rx_packets)
	Agent   LiveCapture
	Tcpdump LiveCapture
	Procs   []ProcUsage // agent, collector, tcpdump, generators (together)
}

// Process indexes in LiveRun.Procs.
const (
	liveAgent = iota
	liveCollector
	liveTcpdump
	liveGenerators
)

// cpuPerM returns CPU seconds per million packets captured.
func cpuPerM(cpu time.Duration, packets uint64) float64 {
	if packets == 0 {
		return 0
	}
	return cpu.Seconds() * 1e6 / float64(packets)
}

// LiveMixResult holds every round for one mix.
type LiveMixResult struct {
	Mix  gen.Mix
	Runs []LiveRun
}

// med returns the median over the rounds of f.
func (m LiveMixResult) med(f func(LiveRun) float64) float64 { return medianOf(m.Runs, f) }

// LiveGoal is issue 4's live goal over a mix's rounds: in every round
// where tcpdump -w dropped packets, the agent dropped none, with no more
// CPU per captured packet than tcpdump.
type LiveGoal struct {
	TcpdumpDropped int // rounds in which tcpdump -w dropped
	AgentNoDrops   int // of those, rounds in which the agent dropped nothing
	AgentCheaper   int // of those, rounds in which the agent's CPU per packet <= tcpdump's
}

// Met reports whether the goal was met; reached is false when tcpdump
// never dropped, so the rate the goal speaks of was not reached.
func (g LiveGoal) Met() (met, reached bool) {
	return g.TcpdumpDropped > 0 && g.AgentNoDrops == g.TcpdumpDropped && g.AgentCheaper == g.TcpdumpDropped, g.TcpdumpDropped > 0
}

// Goal evaluates LiveGoal over the rounds.
func (m LiveMixResult) Goal() LiveGoal {
	var g LiveGoal
	for _, r := range m.Runs {
		if r.Tcpdump.KernelDrops == 0 {
			continue
		}
		g.TcpdumpDropped++
		if r.Agent.Drops() == 0 {
			g.AgentNoDrops++
		}
		if cpuPerM(r.Procs[liveAgent].CPU(), r.Agent.InFile) <= cpuPerM(r.Procs[liveTcpdump].CPU(), r.Tcpdump.InFile) {
			g.AgentCheaper++
		}
	}
	return g
}

// WriteLive writes, for every mix, the traffic sent and received, a
// table of both capturers (medians), and the goal; then the goal over
// all mixes.
func WriteLive(w io.Writer, cfg LiveConfig, res []LiveMixResult, markdown bool) error {
	cfg = cfg.withDefaults()
	ew := &errWriter{w: w}
	rate := "unpaced (as fast as each can send)"
	if cfg.Rate > 0 {
		rate = fmt.Sprintf("%d packets/s each", cfg.Rate)
	}
	ew.printf("UDP from %d generator process(es) in one namespace, %s, for %s per round, across a veth to a second namespace, where the pcapsync agent (into a collector on that namespace's loopback, both --insecure) and tcpdump -w capture the receiving end at once, same filter (udp and dst port 5555). Agent and tcpdump with their defaults (agent ring sized by --ring-time, 31.25 MiB at the default flush; tcpdump's buffer libpcap's default, 2 MiB)", cfg.Generators, rate, cfg.Duration)
	if len(cfg.AgentArgs) > 0 {
		ew.printf(", agent plus %s", strings.Join(cfg.AgentArgs, " "))
	}
	if len(cfg.TcpdumpArgs) > 0 {
		ew.printf(", tcpdump plus %s", strings.Join(cfg.TcpdumpArgs, " "))
	}
	ew.printf(". Medians of %d rounds. Kernel drops: the agent's closing line (also in the collector's interface statistics blocks) and tcpdump's \"dropped by kernel\". CPU: user + system of each process (wait4); the kernel's copy into both rings runs in the sender's softirq and is charged to the generator.\n\n", cfg.Rounds)
	allMet, anyUnreached := len(res) > 0, false
	var summary []string
	for _, m := range res {
		if len(m.Runs) == 0 {
			continue
		}
		sent := m.med(func(r LiveRun) float64 { return float64(r.Sent) })
		rate := m.med(func(r LiveRun) float64 { return float64(r.Sent) / r.Sending.Seconds() })
		rx := m.med(func(r LiveRun) float64 { return float64(r.IfRx) })
		ew.printf("Mix %s: generators sent %s packets (%s packets/s); the capture interface received %s (rx_packets, which counts ARP and IPv6 neighbour discovery too).\n\n",
			m.Mix, groupDigits(int64(sent)), fmtRate(rate), groupDigits(int64(rx)))
		if ew.err == nil {
			ew.err = table(w, liveRows(m), markdown)
		}
		g := m.Goal()
		met, reached := g.Met()
		var line string
		if !reached {
			line = fmt.Sprintf("mix %s: not reached: tcpdump -w dropped nothing in %d rounds at %s packets/s (the most the generator sent), so the rate where it starts dropping is higher than this machine generated", m.Mix, len(m.Runs), fmtRate(rate))
			anyUnreached = true
		} else {
			line = fmt.Sprintf("mix %s: tcpdump -w dropped in %d of %d rounds; in those the agent dropped nothing in %d and used no more CPU per packet than tcpdump in %d: %s",
				m.Mix, g.TcpdumpDropped, len(m.Runs), g.AgentNoDrops, g.AgentCheaper, metStr(met))
		}
		ew.printf("\nGoal, %s\n\n", line)
		summary = append(summary, line)
		allMet = allMet && met
	}
	verdict := metStr(allMet)
	if !allMet && anyUnreached {
		verdict = "NOT MET or not reached"
	}
	ew.printf("Live goal (issue 4) on every mix: %s\n", verdict)
	for _, s := range summary {
		ew.printf("- %s\n", s)
	}
	return ew.err
}

// liveRows is a mix's table: a row per measure, a column per capturer.
func liveRows(m LiveMixResult) [][]string {
	med := func(f func(LiveRun) float64) string { return groupDigits(int64(m.med(f))) }
	perM := func(proc int, c func(LiveRun) LiveCapture) string {
		return fmt.Sprintf("%.3f", m.med(func(r LiveRun) float64 { return cpuPerM(r.Procs[proc].CPU(), c(r).InFile) }))
	}
	agent := func(r LiveRun) LiveCapture { return r.Agent }
	td := func(r LiveRun) LiveCapture { return r.Tcpdump }
	cpu := func(proc int) string {
		return fmt.Sprintf("%.3f", m.med(func(r LiveRun) float64 { return r.Procs[proc].CPU().Seconds() }))
	}
	rss := func(proc int) string {
		return fmtRSS(int64(m.med(func(r LiveRun) float64 { return float64(r.Procs[proc].MaxRSS) })))
	}
	return [][]string{
		{fmt.Sprintf("mix %s, median of %d", m.Mix, len(m.Runs)), "pcapsync agent", "tcpdump -w"},
		{"packets in the file", med(func(r LiveRun) float64 { return float64(r.Agent.InFile) }), med(func(r LiveRun) float64 { return float64(r.Tcpdump.InFile) })},
		{"dropped by kernel", med(func(r LiveRun) float64 { return float64(r.Agent.KernelDrops) }), med(func(r LiveRun) float64 { return float64(r.Tcpdump.KernelDrops) })},
		{"dropped by agent (queue full)", med(func(r LiveRun) float64 { return float64(r.Agent.AgentDrops) }), "-"},
		{"sent but not in the file", med(func(r LiveRun) float64 { return float64(r.Sent) - float64(r.Agent.InFile) }), med(func(r LiveRun) float64 { return float64(r.Sent) - float64(r.Tcpdump.InFile) })},
		{"CPU s", cpu(liveAgent), cpu(liveTcpdump)},
		{"CPU s per M packets captured", perM(liveAgent, agent), perM(liveTcpdump, td)},
		{"collector: CPU s / per M packets", cpu(liveCollector) + " / " + perM(liveCollector, agent), "-"},
		{"peak RSS (collector)", rss(liveAgent) + " (" + rss(liveCollector) + ")", rss(liveTcpdump)},
		{"generators: CPU s / peak RSS", cpu(liveGenerators) + " / " + rss(liveGenerators), ""},
	}
}

// liveRoundLine is a round in a line, for LiveConfig.Log.
func liveRoundLine(mix gen.Mix, round int, r LiveRun) string {
	return fmt.Sprintf("mix %s round %d: sent %d (%s/s), interface rx %d; agent: %d in file, kernel drops %d, agent drops %d, CPU %.3f s (collector %.3f s); tcpdump: %d in file, kernel drops %d, CPU %.3f s; generators CPU %.3f s",
		mix, round, r.Sent, fmtRate(float64(r.Sent)/r.Sending.Seconds()), r.IfRx,
		r.Agent.InFile, r.Agent.KernelDrops, r.Agent.AgentDrops, r.Procs[liveAgent].CPU().Seconds(), r.Procs[liveCollector].CPU().Seconds(),
		r.Tcpdump.InFile, r.Tcpdump.KernelDrops, r.Procs[liveTcpdump].CPU().Seconds(), r.Procs[liveGenerators].CPU().Seconds())
}

// tcpdumpStats is what tcpdump prints on stderr when it stops capturing.
type tcpdumpStats struct {
	Captured, Received, KernelDrops uint64
}

// parseTcpdumpStats reads tcpdump's closing lines:
//
//	1000 packets captured
//	1200 packets received by filter
//	200 packets dropped by kernel
func parseTcpdumpStats(stderr string) (tcpdumpStats, error) {
	var s tcpdumpStats
	fields := map[string]*uint64{"captured": &s.Captured, "received by filter": &s.Received, "dropped by kernel": &s.KernelDrops}
	seen := 0
	for line := range strings.Lines(stderr) {
		num, what, ok := strings.Cut(strings.TrimSpace(line), " packets ")
		if !ok {
			continue
		}
		// A terminal's echoed ^C may precede the first line.
		num = strings.TrimLeftFunc(num, func(r rune) bool { return r < '0' || r > '9' })
		p := fields[what]
		if p == nil {
			continue
		}
		v, err := strconv.ParseUint(num, 10, 64)
		if err != nil {
			continue
		}
		*p = v
		seen++
	}
	if seen != len(fields) {
		return s, fmt.Errorf("tcpdump's packet counts not found in its output: %q", stderr)
	}
	return s, nil
}

// parseGenSent reads "sent N datagrams to ADDR" from gen udp's output.
func parseGenSent(out string) (uint64, error) {
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "sent ")
		if !ok {
			continue
		}
		num, _, ok := strings.Cut(rest, " datagrams")
		if !ok {
			continue
		}
		return strconv.ParseUint(num, 10, 64)
	}
	return 0, fmt.Errorf("no \"sent N datagrams\" line in the generator's output: %q", out)
}
