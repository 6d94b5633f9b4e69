//go:build linux

package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
)

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
