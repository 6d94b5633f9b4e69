//go:build linux

package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/netns"
)

// The tests wait on what a process makes observable (its metrics, its
// summary, files on disk), not on its log. A process started with
// --metrics HOST:PORT (a port, not 0) is scraped through proc.metrics:
//
//   - a collector or writer serves metrics once every listener is bound
//     and it runs (what it logs as "collector listening" or "writer
//     consuming"): waitReady;
//   - an agent serves them once its capture is open and its privileges
//     are dropped (it logs "capturing" before): waitReady;
//   - a collector's pcapsync_collector_sessions_total counts the
//     handshakes it accepted ("agent connected"): waitSessions.
//
// The few waits left on log text wait for the text itself: an error
// message the test is about. Their strings are the constants below.
const (
	// logSavedIndexIgnored: the collector's warning for a retention index
	// it cannot read (a FIFO where the file should be); nothing else
	// shows that it looked at the file and went on.
	logSavedIndexIgnored = "saved index ignored"
	// logNoSpace is the operating system's ENOSPC text, which the
	// collector's storage error must carry to the operator.
	logNoSpace = "no space left on device"
)

// sessionsMetric counts a collector's accepted handshakes.
const sessionsMetric = "pcapsync_collector_sessions_total"

// metricsFlag returns the address a command line gives --metrics, ""
// when it gives none or port 0 (which the test cannot know).
func metricsFlag(argv []string) string {
	for i, a := range argv {
		var v string
		switch {
		case a == "--metrics" && i+1 < len(argv):
			v = argv[i+1]
		case strings.HasPrefix(a, "--metrics="):
			v = strings.TrimPrefix(a, "--metrics=")
		default:
			continue
		}
		if strings.HasSuffix(v, ":0") {
			return ""
		}
		return v
	}
	return ""
}

// nsClient is an HTTP client (5 s timeout, no kept connections) whose
// sockets are made inside network namespace ns ("" for the test's own).
func nsClient(ns string) *http.Client {
	dial := (&net.Dialer{}).DialContext
	if ns != "" {
		dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netns.In(ns, func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
}

// fetchMetrics fetches and parses http://addr/metrics from inside
// network namespace ns ("" for the test's own).
func fetchMetrics(ns, addr string) (metricstest.Families, error) {
	c := nsClient(ns)
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/metrics: %s", addr, resp.Status)
	}
	return metricstest.Parse(strings.NewReader(string(b)))
}

// awaitMetricCond waits up to d until ok holds for p's metric name
// (with labels), or p exits; want describes ok for the error.
func (p *proc) awaitMetricCond(d time.Duration, want string, ok func(float64) bool, name string, labels ...string) error {
	if p.metrics == "" {
		return fmt.Errorf("%s serves no metrics the test can reach (start it with --metrics 127.0.0.1:PORT)", p.name)
	}
	return testutil.Poll(d, func() error {
		exited := p.exited() // before the look: what it served before exiting counts
		fams, err := fetchMetrics(p.netns, p.metrics)
		var v float64
		if err == nil {
			v, err = fams.Lookup(name, labels...)
		}
		switch {
		case err == nil && (ok == nil || ok(v)):
			return nil
		case err == nil:
			err = fmt.Errorf("%s: %s%v is %v, want %s", p.name, name, labels, v, want)
		default:
			err = fmt.Errorf("%s: %s%v, want %s: %w", p.name, name, labels, want, err)
		}
		if exited {
			return fmt.Errorf("%w (it exited: %v): %w", err, p.cmd.ProcessState, testutil.ErrGiveUp)
		}
		return err
	})
}

// awaitMetric waits up to d until p's metric name (with labels) is at
// least want; for use off the test goroutine.
func (p *proc) awaitMetric(d time.Duration, want float64, name string, labels ...string) error {
	return p.awaitMetricCond(d, fmt.Sprintf(">= %v", want), func(v float64) bool { return v >= want }, name, labels...)
}

// waitMetric is awaitMetric failing the test.
func (p *proc) waitMetric(d time.Duration, want float64, name string, labels ...string) {
	p.t.Helper()
	if err := p.awaitMetric(d, want, name, labels...); err != nil {
		p.t.Fatal(err)
	}
}

// waitMetricEq waits up to d until p's metric name (with labels) is
// exactly want (a gauge coming down, such as a connection's).
func (p *proc) waitMetricEq(d time.Duration, want float64, name string, labels ...string) {
	p.t.Helper()
	if err := p.awaitMetricCond(d, fmt.Sprint(want), func(v float64) bool { return v == want }, name, labels...); err != nil {
		p.t.Fatal(err)
	}
}

// awaitReady waits up to d until p serves its metrics (see the top of
// this file for what that means of a collector and of an agent).
func (p *proc) awaitReady(d time.Duration) error {
	if p.metrics == "" {
		return fmt.Errorf("%s serves no metrics the test can reach (start it with --metrics 127.0.0.1:PORT)", p.name)
	}
	return testutil.Poll(d, func() error {
		exited := p.exited()
		_, err := fetchMetrics(p.netns, p.metrics)
		if err != nil && exited {
			return fmt.Errorf("%s exited (%v) before it was ready: %w", p.name, p.cmd.ProcessState, testutil.ErrGiveUp)
		}
		if err != nil {
			return fmt.Errorf("%s not ready: %w", p.name, err)
		}
		return nil
	})
}

// waitReady is awaitReady failing the test.
func (p *proc) waitReady(d time.Duration) {
	p.t.Helper()
	if err := p.awaitReady(d); err != nil {
		p.t.Fatal(err)
	}
}

// awaitSessions waits up to d until collector p accepted n handshakes
// since it started (what it logs as "agent connected").
func (p *proc) awaitSessions(n int, d time.Duration) error {
	return p.awaitMetric(d, float64(n), sessionsMetric)
}

// waitSessions is awaitSessions failing the test.
func (p *proc) waitSessions(n int, d time.Duration) {
	p.t.Helper()
	p.waitMetric(d, float64(n), sessionsMetric)
}

// waitMetric waits up to d until the metric name (with labels) that the
// process serving metrics at addr, in scrape's namespace, reports
// reaches at least want.
func waitMetric(t *testing.T, scrape *netnsScraper, addr string, d time.Duration, want float64, name string, labels ...string) {
	t.Helper()
	testutil.Eventually(t, d, func() error {
		if got := scrape.metrics(addr).Value(t, name, labels...); got < want {
			return fmt.Errorf("%s %v at %s is %v, want %v", name, labels, addr, got, want)
		}
		return nil
	})
}

// metricTotal returns p's metric name summed over its label sets (a
// counter by rule, by reason).
func (p *proc) metricTotal(name string) (float64, error) {
	if p.metrics == "" {
		return 0, fmt.Errorf("%s serves no metrics the test can reach (start it with --metrics 127.0.0.1:PORT)", p.name)
	}
	fams, err := fetchMetrics(p.netns, p.metrics)
	if err != nil {
		return 0, err
	}
	mf := fams[name]
	if mf == nil {
		return 0, nil // a labelled family without samples yet
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return sum, nil
}

// waitMetricTotal waits up to d until p's metric name, summed over its
// label sets, is at least want.
func (p *proc) waitMetricTotal(d time.Duration, want float64, name string) {
	p.t.Helper()
	testutil.Eventually(p.t, d, func() error {
		exited := p.exited()
		got, err := p.metricTotal(name)
		if err == nil && got >= want {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("%s: %s is %v, want %v", p.name, name, got, want)
		}
		if exited {
			return fmt.Errorf("%w (it exited): %w", err, testutil.ErrGiveUp)
		}
		return err
	})
}
