//go:build linux

package bench

import (
	"context"
	"testing"
	"time"
)

// TestLatencyShort runs the latency bench for one second: every packet
// is seen in both files, and the latencies are positive and bounded.
func TestLatencyShort(t *testing.T) {
	requireTools(t, true, "ip", "tcpdump")
	exe := pcapsyncExe(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := Latency(ctx, LatencyConfig{Exe: exe, Rate: 500, Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Pcapsync) != r.Sent || len(r.Tcpdump) != r.Sent {
		t.Fatalf("sent %d, read pcapsync %d, tcpdump %d", r.Sent, len(r.Pcapsync), len(r.Tcpdump))
	}
	for name, ds := range map[string][]time.Duration{"pcapsync": r.Pcapsync, "tcpdump": r.Tcpdump} {
		if ds[0] <= 0 || ds[len(ds)-1] > 5*time.Second {
			t.Errorf("%s latencies out of range: min %v max %v", name, ds[0], ds[len(ds)-1])
		}
	}
}
