package correlate

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestHistQuantiles: against the exact quantiles of the values sorted,
// for delays of both signs and of many magnitudes.
func TestHistQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	tests := []struct {
		name string
		gen  func() int64
	}{
		{"small exact", func() int64 { return rng.Int64N(100) }},
		{"microseconds to seconds", func() int64 { return int64(math.Exp(rng.Float64()*21) * 1000) }},
		{"around zero, both signs", func() int64 { return rng.Int64N(2_000_000) - 1_000_000 }},
		{"all negative", func() int64 { return -rng.Int64N(1e9) - 1 }},
		{"extremes", func() int64 { return []int64{math.MinInt64, math.MaxInt64, 0, -1, 1}[rng.IntN(5)] }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h hist
			var vs []int64
			for range 5000 {
				v := tc.gen()
				h.add(v)
				vs = append(vs, v)
			}
			slices.Sort(vs)
			for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 1} {
				want := vs[int(math.Ceil(q*float64(len(vs))))-1]
				got := h.quantile(q)
				if d := math.Abs(float64(got) - float64(want)); d > math.Abs(float64(want))/subBuckets+1 {
					t.Errorf("q %v: %d, want %d within 1/%d", q, got, want, subBuckets)
				}
			}
			if s := h.summary(); s.Min != vs[0] || s.Max != vs[len(vs)-1] || s.Count != int64(len(vs)) {
				t.Errorf("summary %+v: want min %d max %d count %d", s, vs[0], vs[len(vs)-1], len(vs))
			}
		})
	}
	var h hist
	if s := h.summary(); s != (Delay{}) {
		t.Errorf("empty: %+v", s)
	}
}
