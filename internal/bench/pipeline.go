package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/agent"
	"github.com/pcapsync/pcapsync/internal/gen"
)

// PipelineConfig describes a replay pipeline comparison. The zero value
// of each field but Exe means its default.
type PipelineConfig struct {
	Exe           string    // the pcapsync binary to run; required
	Packets       int       // packets per input file; 0 means 1 000 000
	Mixes         []gen.Mix // 0 means 64 and imix
	Rounds        int       // 0 means 5
	CollectorArgs []string  // more collector flags, after --insecure and the defaults
	// VsCollectorArgs, when set, compares two collector configurations
	// in one run: only pcapsync runs, twice per round, with
	// CollectorArgs (MethodPcapsync) and with these (MethodPcapsyncVs).
	VsCollectorArgs []string
	// VsExe, when set, compares two binaries in one run the same way:
	// MethodPcapsyncVs runs this one (with VsCollectorArgs when set, else
	// CollectorArgs), MethodPcapsync Exe.
	VsExe     string
	AgentArgs []string // more agent flags (--batch-size, --compress ...)
	// MemoryLimit, if above 0, runs the whole bench (inputs, agents,
	// collectors) in a memory cgroup of this many bytes, page cache
	// included, made for the run and removed after (root only): the
	// steady state of a machine whose page cache is full, where every
	// new page written is a page reclaimed, as on a collector that has
	// run for a day. Without it, writes go into free memory.
	MemoryLimit int64
	Dir         string    // work directory, kept afterwards; "" means a temporary one, removed
	Log         io.Writer // every round's figures as they come; nil means none
}

// vs reports whether the run compares two pcapsync configurations.
func (c PipelineConfig) vs() bool { return len(c.VsCollectorArgs) > 0 || c.VsExe != "" }

func (c PipelineConfig) withDefaults() PipelineConfig {
	if c.Packets == 0 {
		c.Packets = 1_000_000
	}
	if len(c.Mixes) == 0 {
		c.Mixes = []gen.Mix{gen.Mix64, gen.MixIMIX}
	}
	if c.Rounds == 0 {
		c.Rounds = 5
	}
	return c
}

// The methods a pipeline run compares, in the order of its tables.
const (
	MethodPcapsync   = "pcapsync"
	MethodPcapsyncVs = "pcapsync vs"
	MethodPoIP       = "PCAP-over-IP"
	MethodRsync      = "tcpdump -w + rsync"
	MethodFloor      = "copy floor"
)

// FloorGoal is issue 30's goal: the pipeline's packets/s at least this
// share of the copy floor's.
const FloorGoal = 0.7

// methodDesc says what each method runs.
var methodDesc = map[string]string{
	MethodPcapsync:   "pcapsync agent --read F -> loopback TCP -> pcapsync collector -> pcapng; both --insecure, the collector otherwise with its defaults (--fsync 1s) plus any --collector-args; time until the agent exits with every packet acknowledged",
	MethodPcapsyncVs: "as pcapsync, the collector with --vs-collector-args instead of --collector-args, or the binary --vs-exe",
	MethodPoIP:       "tcpdump -r F -w - | nc -N 127.0.0.1 PORT -> nc -l 127.0.0.1 PORT > file (three processes, a pipe between the first two); time until the receiver exits",
	MethodRsync:      "tcpdump -r F -w LOCAL, then rsync -a LOCAL DEST/ (a local copy: no ssh); time = tcpdump + rsync = the delivery delay when rsync runs right after tcpdump ends",
	MethodFloor:      "the input's bytes over one loopback TCP connection into a file, nothing parsed: a sender reading F and a receiver writing the file, each in copies of 1 MiB (read(2) and write(2), no sendfile or splice), two processes of this binary; time from the sender's start until the receiver exits",
}

// PipelineRun is one round of one method.
type PipelineRun struct {
	Wall  time.Duration // first process start to the last one's end (see methodDesc)
	Procs []ProcUsage   // one per process, in the same order every round
}

// CPU returns the CPU time of all the run's processes.
func (r PipelineRun) CPU() time.Duration {
	var t time.Duration
	for _, p := range r.Procs {
		t += p.CPU()
	}
	return t
}

// Bytes returns the bytes all the run's processes wrote to disk.
func (r PipelineRun) Bytes() int64 {
	var n int64
	for _, p := range r.Procs {
		n += p.Bytes
	}
	return n
}

// MethodResult holds every round of one method.
type MethodResult struct {
	Name string
	Runs []PipelineRun
}

// med returns the median over the rounds of f.
func (m MethodResult) med(f func(PipelineRun) float64) float64 { return medianOf(m.Runs, f) }

// PacketRate returns the median packets per second for n packets.
func (m MethodResult) PacketRate(n int) float64 {
	return m.med(func(r PipelineRun) float64 { return float64(n) / r.Wall.Seconds() })
}

// CPUPerM returns the median CPU seconds per million packets of all
// processes (proc < 0) or of process proc.
func (m MethodResult) CPUPerM(n, proc int) float64 {
	return m.med(func(r PipelineRun) float64 {
		if proc < 0 {
			return r.CPU().Seconds() * 1e6 / float64(n)
		}
		return r.Procs[proc].CPU().Seconds() * 1e6 / float64(n)
	})
}

// MixResult holds the comparison for one input file.
type MixResult struct {
	Mix        gen.Mix
	Packets    int
	InputBytes int64
	Methods    []MethodResult // MethodPcapsync, MethodPoIP, MethodRsync
}

func (mr MixResult) method(name string) MethodResult {
	for _, m := range mr.Methods {
		if m.Name == name {
			return m
		}
	}
	return MethodResult{Name: name}
}

// Goals returns issue 4's two pipeline goals for this mix: pcapsync's
// packet rate at least twice PCAP-over-IP's, and pcapsync's CPU per
// packet (all its processes) below tcpdump -w + rsync's.
func (mr MixResult) Goals() (rateRatio float64, rateMet bool, cpuRatio float64, cpuMet bool) {
	ours, poip, rs := mr.method(MethodPcapsync), mr.method(MethodPoIP), mr.method(MethodRsync)
	if len(ours.Runs) == 0 || len(poip.Runs) == 0 || len(rs.Runs) == 0 {
		return 0, false, 0, false
	}
	rateRatio = ours.PacketRate(mr.Packets) / poip.PacketRate(mr.Packets)
	cpuRatio = ours.CPUPerM(mr.Packets, -1) / rs.CPUPerM(mr.Packets, -1)
	return rateRatio, rateRatio >= 2, cpuRatio, cpuRatio < 1
}

// Vs returns MethodPcapsyncVs's median packet rate and CPU per packet
// (all processes) over MethodPcapsync's; 0 without both.
func (mr MixResult) Vs() (rateRatio, cpuRatio float64) {
	base, vs := mr.method(MethodPcapsync), mr.method(MethodPcapsyncVs)
	if len(base.Runs) == 0 || len(vs.Runs) == 0 {
		return 0, 0
	}
	return vs.PacketRate(mr.Packets) / base.PacketRate(mr.Packets), vs.CPUPerM(mr.Packets, -1) / base.CPUPerM(mr.Packets, -1)
}

// Paired returns the collector's CPU in MethodPcapsyncVs's run over
// its CPU in MethodPcapsync's run of the same round (the methods
// alternate, so the two of a round ran next to each other): the median
// of those ratios and their lower and upper quartiles, and the median
// of the rounds' differences in the collector's user CPU over its CPU in
// MethodPcapsync's run. Pairing the rounds takes out what changes
// slowly on the machine (page cache, writeback, other load), which
// moves whole rounds by more than a few percent; a change that adds
// work only in user space (the flow table) shows in the user CPU
// without the kernel's socket and page cache noise. Zeros without both
// methods.
func (mr MixResult) Paired() (ratio, q1, q3, userShare float64) {
	base, vs := mr.method(MethodPcapsync), mr.method(MethodPcapsyncVs)
	n := min(len(base.Runs), len(vs.Runs))
	if n == 0 {
		return 0, 0, 0, 0
	}
	ratios, users := make([]float64, 0, n), make([]float64, 0, n)
	for i := range n {
		b, v := base.Runs[i].collector(), vs.Runs[i].collector()
		if b.CPU() <= 0 {
			continue
		}
		ratios = append(ratios, v.CPU().Seconds()/b.CPU().Seconds())
		users = append(users, (v.User-b.User).Seconds()/b.CPU().Seconds())
	}
	if len(ratios) == 0 {
		return 0, 0, 0, 0
	}
	ratio = median(ratios) // sorts ratios
	return ratio, quartile(ratios, 1), quartile(ratios, 3), median(users)
}

// collector returns the usage of the run's collector (a pcapsync run's
// second process); zero for another run.
func (r PipelineRun) collector() ProcUsage {
	for _, p := range r.Procs {
		if p.Name == "collector" {
			return p
		}
	}
	return ProcUsage{}
}

// Floor returns the median packet rate of method name (MethodPcapsync
// or MethodPcapsyncVs) over the copy floor's; 0 without both.
func (mr MixResult) Floor(name string) float64 {
	m, floor := mr.method(name), mr.method(MethodFloor)
	if len(m.Runs) == 0 || len(floor.Runs) == 0 {
		return 0
	}
	return m.PacketRate(mr.Packets) / floor.PacketRate(mr.Packets)
}

// floorLines says, for each pcapsync method of mr, its packets/s over
// the copy floor's and whether that meets FloorGoal.
func (mr MixResult) floorLines() []string {
	var out []string
	for _, name := range []string{MethodPcapsync, MethodPcapsyncVs} {
		if r := mr.Floor(name); r > 0 {
			out = append(out, fmt.Sprintf("mix %s: %s packets/s over the copy floor's: %.3fx (issue 30: at least %.1fx, %s)", mr.Mix, name, r, FloorGoal, metStr(r >= FloorGoal)))
		}
	}
	return out
}

// WritePipeline writes, for every mix, a table per method (median
// packet rate, time, CPU per million packets and peak RSS of every
// process, bytes written), a table of the methods against pcapsync, and
// whether the goals are met; then the goals over all mixes.
func WritePipeline(w io.Writer, cfg PipelineConfig, res []MixResult, markdown bool) error {
	cfg = cfg.withDefaults()
	ew := &errWriter{w: w}
	ew.printf("Collector flags: --insecure (plain TCP on loopback), defaults otherwise (--fsync 1s)")
	if len(cfg.CollectorArgs) > 0 {
		ew.printf(", plus %s", strings.Join(cfg.CollectorArgs, " "))
	}
	if len(cfg.VsCollectorArgs) > 0 {
		ew.printf("; against (%s) the same plus %s instead", MethodPcapsyncVs, strings.Join(cfg.VsCollectorArgs, " "))
	}
	if cfg.VsExe != "" {
		ew.printf("; %s runs %s, %s runs %s", MethodPcapsync, cfg.Exe, MethodPcapsyncVs, cfg.VsExe)
	}
	if len(cfg.AgentArgs) > 0 {
		ew.printf("; agent flags: %s", strings.Join(cfg.AgentArgs, " "))
	}
	if cfg.MemoryLimit > 0 {
		ew.printf("; everything in a memory cgroup of %s bytes, page cache included (a full page cache: written pages are reclaimed pages)", groupDigits(cfg.MemoryLimit))
	}
	ew.printf(". Input read once into the page cache before timing; output to local disk through the page cache (only the collector syncs, every 1s by default). The methods alternate, each round starting with the next one; medians of %d rounds, ratios of medians. CPU is user + system time of each process and the children it reaped (wait4); peak RSS the largest VmHWM of the process and its children, sampled every 5 ms (wait4's ru_maxrss would count this bench's own RSS: Go starts children with vfork).\n\n", cfg.Rounds)
	allMet := len(res) > 0
	var summary []string
	for _, mr := range res {
		ew.printf("Mix %s: %d packets, input %s bytes.\n\n", mr.Mix, mr.Packets, groupDigits(mr.InputBytes))
		for _, m := range mr.Methods {
			ew.printf("%s: %s.\n\n", m.Name, methodDesc[m.Name])
			if ew.err == nil {
				ew.err = table(w, methodRows(m, mr.Packets, len(m.Runs)), markdown)
			}
			ew.printf("\n")
		}
		if ew.err == nil {
			ew.err = table(w, compareRows(mr), markdown)
		}
		floor := mr.floorLines()
		for _, line := range floor {
			ew.printf("\n%s\n", line)
		}
		if cfg.vs() {
			rate, cpu := mr.Vs()
			line := fmt.Sprintf("mix %s: %s / %s: packets/s %.3fx, CPU per packet %.3fx", mr.Mix, MethodPcapsyncVs, MethodPcapsync, rate, cpu)
			ratio, q1, q3, user := mr.Paired()
			paired := fmt.Sprintf("mix %s: %s / %s: collector CPU, median of the %d rounds' ratios %.3fx (quartiles %.3f-%.3f); collector user CPU, median of the rounds' differences %+.1f%% of its CPU", mr.Mix, MethodPcapsyncVs, MethodPcapsync, cfg.Rounds, ratio, q1, q3, 100*user)
			ew.printf("\n%s\n%s\n\n", line, paired)
			summary = append(append(summary, line, paired), floor...)
			continue
		}
		rate, rateMet, cpu, cpuMet := mr.Goals()
		g1 := fmt.Sprintf("mix %s: pcapsync packets/s >= 2x PCAP-over-IP: %.2fx, %s", mr.Mix, rate, metStr(rateMet))
		g2 := fmt.Sprintf("mix %s: pcapsync CPU per packet < tcpdump -w + rsync: %.2fx, %s", mr.Mix, cpu, metStr(cpuMet))
		ew.printf("\nGoal, %s\nGoal, %s\n\n", g1, g2)
		summary = append(append(summary, g1, g2), floor...)
		allMet = allMet && rateMet && cpuMet
	}
	if cfg.vs() {
		ew.printf("Comparison, medians of rounds that alternate:\n")
	} else {
		ew.printf("Pipeline goals (issue 4) on every mix: %s\n", metStr(allMet))
	}
	for _, s := range summary {
		ew.printf("- %s\n", s)
	}
	return ew.err
}

// methodRows is one method's table: a total row, then one per process.
func methodRows(m MethodResult, n, rounds int) [][]string {
	rows := [][]string{{fmt.Sprintf("%s, median of %d", m.Name, rounds), "packets/s", "seconds", "CPU s per M packets", "user / sys s per M", "peak RSS", "bytes written"}}
	if len(m.Runs) == 0 {
		return rows
	}
	secs := m.med(func(r PipelineRun) float64 { return r.Wall.Seconds() })
	bytes := m.med(func(r PipelineRun) float64 { return float64(r.Bytes()) })
	rows = append(rows, []string{"all processes", fmtRate(m.PacketRate(n)), fmt.Sprintf("%.3f", secs),
		fmt.Sprintf("%.3f", m.CPUPerM(n, -1)), "", "", groupDigits(int64(bytes))})
	perM := func(d time.Duration) float64 { return d.Seconds() * 1e6 / float64(n) }
	for i, p := range m.Runs[0].Procs {
		user := m.med(func(r PipelineRun) float64 { return perM(r.Procs[i].User) })
		sys := m.med(func(r PipelineRun) float64 { return perM(r.Procs[i].Sys) })
		rss := m.med(func(r PipelineRun) float64 { return float64(r.Procs[i].MaxRSS) })
		wall, written := "", ""
		if p.Wall > 0 {
			wall = fmt.Sprintf("%.3f", m.med(func(r PipelineRun) float64 { return r.Procs[i].Wall.Seconds() }))
		}
		if p.Bytes > 0 {
			written = groupDigits(int64(m.med(func(r PipelineRun) float64 { return float64(r.Procs[i].Bytes) })))
		}
		rows = append(rows, []string{p.Name, "", wall, fmt.Sprintf("%.3f", m.CPUPerM(n, i)),
			fmt.Sprintf("%.3f / %.3f", user, sys), fmtRSS(int64(rss)), written})
	}
	return rows
}

// compareRows is the table of every method against pcapsync.
func compareRows(mr MixResult) [][]string {
	rows := [][]string{{fmt.Sprintf("mix %s, medians", mr.Mix), "packets/s", "pcapsync / this", "CPU s per M packets", "pcapsync / this", "largest peak RSS", "bytes written", "pcapsync / this", "delivery delay s"}}
	ours := mr.method(MethodPcapsync)
	if len(ours.Runs) == 0 {
		return rows
	}
	n := mr.Packets
	bytes := func(m MethodResult) float64 { return m.med(func(r PipelineRun) float64 { return float64(r.Bytes()) }) }
	for _, m := range mr.Methods {
		if len(m.Runs) == 0 {
			continue
		}
		rss := m.med(func(r PipelineRun) float64 {
			var x int64
			for _, p := range r.Procs {
				x = max(x, p.MaxRSS)
			}
			return float64(x)
		})
		rows = append(rows, []string{m.Name,
			fmtRate(m.PacketRate(n)), fmt.Sprintf("%.2f", ours.PacketRate(n)/m.PacketRate(n)),
			fmt.Sprintf("%.3f", m.CPUPerM(n, -1)), fmt.Sprintf("%.2f", ours.CPUPerM(n, -1)/m.CPUPerM(n, -1)),
			fmtRSS(int64(rss)),
			groupDigits(int64(bytes(m))), fmt.Sprintf("%.2f", bytes(ours)/bytes(m)),
			fmt.Sprintf("%.3f", m.med(func(r PipelineRun) float64 { return r.Wall.Seconds() })),
		})
	}
	return rows
}

// roundLine is one method's round in a line, for PipelineConfig.Log.
func roundLine(mix gen.Mix, round int, name string, n int, r PipelineRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "mix %s round %d %s: %s packets/s, %.3f s, %s bytes;", mix, round, name,
		fmtRate(float64(n)/r.Wall.Seconds()), r.Wall.Seconds(), groupDigits(r.Bytes()))
	for _, p := range r.Procs {
		fmt.Fprintf(&b, " %s %.3f s CPU (user %.3f) %s;", p.Name, p.CPU().Seconds(), p.User.Seconds(), fmtRSS(p.MaxRSS))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// fmtRSS is fmtBytes but for 0, a process that ended before its first
// sample.
func fmtRSS(n int64) string {
	if n == 0 {
		return "-"
	}
	return fmtBytes(n)
}

func metStr(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

// groupDigits writes n with a space between groups of three digits.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(' ')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// errWriter keeps the first write error, so a report can print freely
// and check once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// parseAgentSummary reads the agent's closing line ("pcapsync agent:
// packets read 3000, sent 3000, acknowledged 3000, ...") from its
// output.
func parseAgentSummary(out string) (agent.Summary, error) {
	var s agent.Summary
	fields := map[string]*uint64{
		"packets read": &s.Read, "sent": &s.Sent, "acknowledged": &s.Acked,
		"dropped by agent": &s.Dropped, "dropped by kernel": &s.KernelDrops,
		"unacknowledged": &s.Unacked, "reconnects": &s.Reconnects, "dropped by rate limit": &s.RateDrops,
	}
	for line := range strings.Lines(out) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "pcapsync agent: ")
		if !ok {
			continue
		}
		seen := 0
		for part := range strings.SplitSeq(rest, ", ") {
			i := strings.LastIndexByte(part, ' ')
			if i < 0 {
				continue
			}
			p := fields[part[:i]]
			if p == nil {
				continue
			}
			v, err := strconv.ParseUint(part[i+1:], 10, 64)
			if err != nil {
				return s, fmt.Errorf("agent summary %q: %w", part, err)
			}
			*p = v
			seen++
		}
		if seen != len(fields) {
			return s, fmt.Errorf("agent summary has %d of its %d counters: %q", seen, len(fields), line)
		}
		return s, nil
	}
	return s, fmt.Errorf("no agent summary line in its output: %q", out)
}
