package agent

import "testing"

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
