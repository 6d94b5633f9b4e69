// Command report turns the output of the wirecompare module's benchmarks
// (several -count runs) into REPORT.md and chart.svg: medians and
// confidence intervals computed with benchstat's library, ratios against
// the wire format, the goals checked, and the machine and date.
// wirecompare/run.sh runs it; see there for the one command.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

type config struct {
	raw, out, chart, note string
}

func run(args []string, stderr io.Writer) error {
	var c config
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.raw, "raw", "results/raw.txt", "go test -bench output to read")
	fs.StringVar(&c.out, "out", "REPORT.md", "Markdown report to write")
	fs.StringVar(&c.chart, "chart", "chart.svg", "SVG chart to write")
	fs.StringVar(&c.note, "note", "", "a line to put under the title (e.g. why figures are preliminary)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	f, err := os.Open(c.raw)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := readResults(bufio.NewReader(f), c.raw)
	if err != nil {
		return err
	}
	var md bytes.Buffer
	writeReport(&md, res, c, machine(res))
	if err := os.WriteFile(c.out, md.Bytes(), 0o644); err != nil {
		return err
	}
	var svg bytes.Buffer
	writeChart(&svg, res)
	return os.WriteFile(c.chart, svg.Bytes(), 0o644)
}

// machine describes where the benchmarks ran: CPU model, CPUs, memory,
// kernel, Go version and date, from the configuration lines run.sh puts
// in the raw output; what is missing there is taken from this machine
// and this moment.
func machine(res *results) string {
	get := func(k, fallback string) string {
		if v := res.conf[k]; v != "" {
			return v
		}
		return fallback
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	var kb int
	fmt.Sscanf(procField("/proc/meminfo", "MemTotal"), "%d", &kb)
	return fmt.Sprintf("%s, %s CPUs, %s, %s, %s, %s/%s. Date: %s.",
		get("cpu", procField("/proc/cpuinfo", "model name")),
		get("nproc", fmt.Sprint(runtime.NumCPU())),
		get("memory", fmt.Sprintf("%.0f GiB", float64(kb)/(1<<20))),
		get("kernel", "Linux "+strings.TrimSpace(string(kernel))),
		get("go", runtime.Version()), res.conf["goos"], res.conf["goarch"],
		get("date", time.Now().UTC().Format("2006-01-02T15:04Z")))
}

// procField returns the value of the first "key: value" line of a
// /proc file, or "unknown".
func procField(path, key string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
