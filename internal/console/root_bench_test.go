package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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

// BenchmarkDownload: GET /api/download of a whole root
// (PCAPSYNC_BENCH_ROOT) through the console's front door on loopback,
// read by the benchmark, alternated in rounds with `pcapsync query
// --dir ROOT -w -` (PCAPSYNC_BENCH_CLI) read from its stdout: the same
// pcapng but for the section comment's times. BENCHMARKS.md, Issue 29.
func BenchmarkDownload(b *testing.B) {
	root, cli, rounds := benchRoot(b)
	base := serveConsole(b, root)
	var web, cl []time.Duration
	var n int64
	for b.Loop() {
		for r := range rounds {
			wn, _, wd := fetch(b, base+"/api/download", false)
			cn, _, cd := runCLI(b, cli, false, "query", "--dir", root, "-w", "-")
			if d := wn - cn; d < -4096 || d > 4096 {
				b.Fatalf("the download is %d bytes, the CLI's %d", wn, cn)
			}
			web, cl, n = append(web, wd), append(cl, cd), wn
			b.Logf("round %d: console %v (%.0f MB/s), CLI %v (%.0f MB/s), %d bytes", r+1, wd, mbps(wn, wd), cd, mbps(cn, cd), wn)
		}
	}
	wm, wl, wh := spread(web)
	cm, clo, chi := spread(cl)
	b.Logf("console: median %.0f MB/s (%v; %v to %v); CLI: median %.0f MB/s (%v; %v to %v)", mbps(n, wm), wm, wl, wh, mbps(n, cm), cm, clo, chi)
	b.ReportMetric(mbps(n, wm), "console-MB/s")
	b.ReportMetric(mbps(n, cm), "cli-MB/s")
}
