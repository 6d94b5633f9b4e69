package agent

import (
	"testing"
	"time"
)

func TestRateLimiter(t *testing.T) {
	tests := []struct {
		name        string
		rate, burst float64
		gapNs       int64
		n, want     int
	}{
		{"off", 0, 0, 1, 1000, 1000},
		{"under the rate", 1000, 10, 2_000_000, 500, 500},       // 500/s offered, 1000/s allowed
		{"twice the rate", 1000, 10, 500_000, 10000, 5000 + 10}, // half pass, plus the burst
		{"burst only", 1000, 50, 0, 200, 50},                    // all at one instant
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRateLimiter(tt.rate, tt.burst)
			ts, got := int64(1_700_000_000_000_000_000), 0
			for range tt.n {
				if l.allow(ts) {
					got++
				}
				ts += tt.gapNs
			}
			if d := got - tt.want; d < -1 || d > 1 {
				t.Fatalf("allowed %d of %d, want %d", got, tt.n, tt.want)
			}
		})
	}
}

func TestPacer(t *testing.T) {
	var none pacer
	start := time.Now()
	for range 1000 {
		none.wait()
	}
	p := pacer{rate: 1000}
	for range 51 {
		p.wait()
	}
	// 51 packets at 1000/s: the last is due 50ms after the first.
	if d := time.Since(start); d < 45*time.Millisecond || d > 2*time.Second {
		t.Fatalf("51 packets at 1000/s took %v, want about 50ms", d)
	}
}
