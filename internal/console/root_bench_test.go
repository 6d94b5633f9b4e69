package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcapsync/pcapsync/internal/queryhttp"
)

// benchRoot is the root (PCAPSYNC_BENCH_ROOT, read only) and the
// pcapsync binary (PCAPSYNC_BENCH_CLI) the console's benchmarks against
// the CLI take, and their rounds (PCAPSYNC_BENCH_ROUNDS, default 5);
// the benchmark is skipped without them.
func benchRoot(b *testing.B) (root, cli string, rounds int) {
	root, cli = os.Getenv("PCAPSYNC_BENCH_ROOT"), os.Getenv("PCAPSYNC_BENCH_CLI")
	if root == "" || cli == "" {
		b.Skip("PCAPSYNC_BENCH_ROOT and PCAPSYNC_BENCH_CLI name the root and the pcapsync binary")
	}
	rounds = 5
	if s := os.Getenv("PCAPSYNC_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	return root, cli, rounds
}

// serveConsole serves the console of dir (no token: a loopback plain
// client is admitted) behind a real front door on loopback and
// returns its base URL.
func serveConsole(b *testing.B, dir string) string {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := New(Config{Dir: dir, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	srv, err := queryhttp.New(queryhttp.Config{Listen: "127.0.0.1:0", Dir: dir, Handler: h, Name: "console", Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		<-done
	})
	return "http://" + srv.Addr()
}

// fetch GETs url and returns its body's bytes (read into io.Discard
// unless keep) and the time to the last byte.
func fetch(b *testing.B, url string, keep bool) (int64, []byte, time.Duration) {
	start := time.Now()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		b.Fatalf("GET %s: %s %s", url, resp.Status, body)
	}
	if keep {
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return int64(len(body)), body, time.Since(start)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	return n, nil, time.Since(start)
}

// runCLI runs the pcapsync binary with args, its stdout read into
// io.Discard unless keep, and returns its stdout's bytes and the time
// it took.
func runCLI(b *testing.B, cli string, keep bool, args ...string) (int64, []byte, time.Duration) {
	cmd := exec.Command(cli, args...)
	cmd.Stderr = io.Discard
	// pcapsync takes PCAPSYNC_X for its flag --x: not the benchmark's.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "PCAPSYNC_BENCH_") })
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var n int64
	var body []byte
	if keep {
		body, err = io.ReadAll(out)
		n = int64(len(body))
	} else {
		n, err = io.Copy(io.Discard, out)
	}
	if werr := cmd.Wait(); err == nil {
		err = werr
	}
	if err != nil {
		b.Fatalf("%s %v: %v", cli, args, err)
	}
	return n, body, time.Since(start)
}

// spread is the median, least and most of ds.
func spread(ds []time.Duration) (med, lo, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

// mbps is n bytes in d as MB/s.
func mbps(n int64, d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }

// cpuSelf is the CPU time (user and system) this process used so far.
func cpuSelf() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timed runs name with args, its stdout to /dev/null, and returns the
// time it took and the CPU time it used.
func timed(b *testing.B, name string, args ...string) (took, cpu time.Duration) {
	cmd := exec.Command(name, args...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "PCAPSYNC_BENCH_") })
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %v: %v %s", name, args, err, out)
	}
	return time.Since(start), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

// BenchmarkDownload: GET /api/download of a whole root
// (PCAPSYNC_BENCH_ROOT) through the console's front door on loopback,
// fetched by curl into /dev/null, alternated in rounds with `pcapsync
// query --dir ROOT -w /dev/null` (PCAPSYNC_BENCH_CLI); the bytes are
// those of `query -w -` (the same pcapng but for the section comment's
// times). Each side's CPU time: the console's process (this one: the
// server) and curl's; the CLI's.
func BenchmarkDownload(b *testing.B) {
	root, cli, rounds := benchRoot(b)
	base := serveConsole(b, root)
	n, _, _ := runCLI(b, cli, false, "query", "--dir", root, "-w", "-")
	var web, cl []time.Duration
	for b.Loop() {
		for r := range rounds {
			c0 := cpuSelf()
			wd, curlCPU := timed(b, "curl", "-sf", "-o", "/dev/null", base+"/api/download")
			wc := cpuSelf() - c0 + curlCPU
			cd, cc := timed(b, cli, "query", "--dir", root, "-w", "/dev/null")
			web, cl = append(web, wd), append(cl, cd)
			b.Logf("round %d: console %v (%.0f MB/s, CPU %v), CLI %v (%.0f MB/s, CPU %v), %d bytes", r+1, wd, mbps(n, wd), wc, cd, mbps(n, cd), cc, n)
		}
	}
	wm, wl, wh := spread(web)
	cm, clo, chi := spread(cl)
	b.Logf("console: median %.0f MB/s (%v; %v to %v); CLI: median %.0f MB/s (%v; %v to %v)", mbps(n, wm), wm, wl, wh, mbps(n, cm), cm, clo, chi)
	b.ReportMetric(mbps(n, wm), "console-MB/s")
	b.ReportMetric(mbps(n, cm), "cli-MB/s")
}

// BenchmarkFlowsPage: of a whole root (PCAPSYNC_BENCH_ROOT), in
// alternated rounds: GET /api/flows (its first page of 100 flows, the
// total, the top lists and the chart; time to its last byte), the flows
// page in headless Chromium (from the navigation to the page showing
// its rows and coverage), and the CLI (PCAPSYNC_BENCH_CLI): `pcapsync
// flows --dir ROOT --top 10 --by bytes` and `pcapsync flows --dir ROOT
// --json` (every flow, a line each). BENCHMARKS.md, Issue 29.
func BenchmarkFlowsPage(b *testing.B) {
	root, cli, rounds := benchRoot(b)
	base := serveConsole(b, root)
	ctx := browser(b)
	var api, pg, top, js []time.Duration
	var total int
	for b.Loop() {
		for r := range rounds {
			c0 := cpuSelf()
			_, body, ad := fetch(b, base+"/api/flows", true)
			ac := cpuSelf() - c0
			var a struct {
				Total int `json:"total"`
			}
			if err := json.Unmarshal(body, &a); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if err := chromedp.Do(ctx, chromedp.Navigate(base+"/flows")); err != nil {
				b.Fatal(err)
			}
			rows, err := chromedp.Run(ctx, chromedp.Poll[int](`(c => c.includes("flows of") && document.querySelectorAll("#flows tbody tr").length)(document.getElementById("coverage").textContent)`,
				chromedp.WithPollingTimeout(2*time.Minute), chromedp.WithPollingInterval(5*time.Millisecond)))
			pd := time.Since(start)
			if err != nil || rows != min(a.Total, DefaultFlowRows) {
				b.Fatalf("flows page: %d rows (%v)", rows, err)
			}
			td, tc := timed(b, cli, "flows", "--dir", root, "--top", "10", "--by", "bytes")
			_, lines, jd := runCLI(b, cli, true, "flows", "--dir", root, "--json")
			if n := strings.Count(string(lines), "\n"); n != a.Total {
				b.Fatalf("flows --json: %d lines; the console's total %d", n, a.Total)
			}
			api, pg, top, js, total = append(api, ad), append(pg, pd), append(top, td), append(js, jd), a.Total
			b.Logf("round %d: API %v (CPU %v, %d bytes), page %v, CLI --top %v (CPU %v), CLI --json %v (%d flows)", r+1, ad, ac, len(body), pd, td, tc, jd, a.Total)
		}
	}
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"api", api}, {"page", pg}, {"cli-top", top}, {"cli-json", js}} {
		med, lo, hi := spread(m.ds)
		b.Logf("%s: median %v, %v to %v (%d flows)", m.name, med, lo, hi, total)
		b.ReportMetric(float64(med.Milliseconds()), m.name+"-ms")
	}
}
