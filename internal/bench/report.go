package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// table writes rows (the first is the header) as aligned plain text, or
// as a Markdown table when markdown is set.
func table(w io.Writer, rows [][]string, markdown bool) error {
	if markdown {
		var b strings.Builder
		for i, r := range rows {
			cells := make([]string, len(r))
			for j, c := range r {
				cells[j] = strings.ReplaceAll(c, "|", `\|`) // a pipe in a cell ends it
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
			if i == 0 {
				b.WriteString("|" + strings.Repeat("---|", len(r)) + "\n")
			}
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// WriteTransport writes Transport's results as a table: one row per
// mode with the median rate and its ratio to the same protocol's one
// message per frame.
func WriteTransport(w io.Writer, res []TransportResult, markdown bool) error {
	rows := [][]string{{"mode", "msgs/frame", "frame bytes", "msg/s (median)", "vs 1/frame", "frames/s (median)", "sent", "received", "lost"}}
	base := map[string]float64{}
	for _, r := range res {
		if r.PerFrame == 1 {
			base[r.Proto] = r.Median()
		}
	}
	for _, r := range res {
		unit := "write"
		if r.Proto == "udp" {
			unit = "datagram"
		}
		t := r.Totals()
		ratio := "-"
		if b := base[r.Proto]; b > 0 {
			ratio = fmt.Sprintf("%.1fx", r.Median()/b)
		}
		lost := fmt.Sprint(r.Lost())
		if t.Sent > 0 && r.Lost() > 0 {
			lost += fmt.Sprintf(" (%.2f%%)", 100*float64(r.Lost())/float64(t.Sent))
		}
		if t.SendErrors > 0 {
			lost += fmt.Sprintf(", %d send errors", t.SendErrors)
		}
		rows = append(rows, []string{
			fmt.Sprintf("%s, %d per %s", strings.ToUpper(r.Proto), r.PerFrame, unit),
			fmt.Sprint(r.PerFrame), fmt.Sprint(r.FrameBytes),
			fmtRate(r.Median()), ratio, fmtRate(r.Median() / float64(r.PerFrame)),
			fmt.Sprint(t.Sent), fmt.Sprint(t.Received), lost,
		})
	}
	return table(w, rows, markdown)
}

// WriteFanin writes Fanin's result as a table of measure, value and the
// goal of issue 4.
func WriteFanin(w io.Writer, cfg FaninConfig, r FaninResult, markdown bool) error {
	cfg = cfg.withDefaults()
	yes := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT MET"
	}
	allWritten := r.Written == r.Sent && r.Sent > 0
	rows := [][]string{
		{"measure", "value", "goal"},
		{"agents connected", fmt.Sprintf("%d of %d (in %s)", r.Connected, r.Agents, r.Setup.Round(time.Millisecond)), "10000"},
		{"load", fmt.Sprintf("%d packets/s of %d B per agent, one per batch, %s", cfg.Rate, cfg.Size, r.Window.Round(time.Millisecond)), ""},
		{"packets sent / written", fmt.Sprintf("%d / %d", r.Sent, r.Written), "all written: " + yes(allWritten)},
		{"batches sent / acked", fmt.Sprintf("%d / %d", r.Batches, r.Acked), ""},
		{"ack latency p50 / p99 / max", fmt.Sprintf("%s / %s / %s", fmtDur(r.AckP50), fmtDur(r.AckP99), fmtDur(r.AckMax)), "p99 < 100 ms: " + yes(r.AckP99 > 0 && r.AckP99 < 100*time.Millisecond)},
		{"  first batch of each agent (opens its file) p50 / p99", fmt.Sprintf("%s / %s", fmtDur(r.FirstP50), fmtDur(r.FirstP99)), ""},
		{"  batches sent after the first second p50 / p99", fmt.Sprintf("%s / %s", fmtDur(r.SteadyP50), fmtDur(r.SteadyP99)), "p99 < 100 ms: " + yes(r.SteadyP99 > 0 && r.SteadyP99 < 100*time.Millisecond)},
		{"this process CPU user + sys (collector and agents, or agents alone)", fmt.Sprintf("%.2f + %.2f s = %.0f%% of one core", r.CPUUser.Seconds(), r.CPUSys.Seconds(), r.CPUPercent()), ""},
		{"this process peak RSS, VmHWM, shutdown included", fmtBytes(r.PeakRSS), "< 1 GiB: " + yes(r.PeakRSS > 0 && r.PeakRSS < 1<<30)},
		{"  peak RSS up to the end of sending / RSS then", fmt.Sprintf("%s / %s", fmtBytes(r.PeakRSSSending), fmtBytes(r.RSS)), ""},
		{"collector process CPU user + sys / peak RSS before shutdown / RSS at the end of sending", collectorRow(r), ""},
		{"after sending: last ack / goodbyes and collector stop", fmt.Sprintf("%s / %s", fmtDur(r.Drain), fmtDur(r.Stop)), ""},
		{"errors: agents / collector", fmt.Sprintf("%d / %d", r.AgentErrors, r.CollectorErrors), "0 / 0"},
	}
	return table(w, rows, markdown)
}

// collectorRow is the collector process's CPU and memory, when it ran
// as one (FaninConfig.CollectorCommand).
func collectorRow(r FaninResult) string {
	if r.CollectorPeakRSS == 0 {
		return "in this process"
	}
	cpu := r.CollectorCPUUser + r.CollectorCPUSys
	return fmt.Sprintf("%.2f + %.2f s = %.0f%% of one core / %s / %s", r.CollectorCPUUser.Seconds(), r.CollectorCPUSys.Seconds(),
		100*cpu.Seconds()/r.Window.Seconds(), fmtBytes(r.CollectorPeakRSS), fmtBytes(r.CollectorRSS))
}

func fmtRate(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2f M", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1f k", x/1e3)
	}
	return fmt.Sprintf("%.0f", x)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
