package correlate

import (
	"math"
	"math/bits"
)

// subBuckets per power of two: a delay is kept to within 1/128 (0.8%)
// of its value; below 128 ns exactly.
const (
	subBits    = 7
	subBuckets = 1 << subBits
	nBuckets   = (64 - subBits + 1) * subBuckets
)

// hist is a log-linear histogram of signed delays in nanoseconds, of
// fixed size whatever the number of values: min and max exact, the
// quantiles to within 0.8%.
type hist struct {
	n        int64
	min, max int64
	neg, pos [nBuckets]uint64 // neg counts -d for d < 0
}

// bucket is the index of magnitude v.
func bucket(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// mid is the middle of bucket i's range of magnitudes.
func mid(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	e := i/subBuckets - 1
	lo := uint64(i%subBuckets+subBuckets) << e
	return lo + (uint64(1)<<e)/2
}

func (h *hist) add(d int64) {
	if h.n == 0 || d < h.min {
		h.min = d
	}
	if h.n == 0 || d > h.max {
		h.max = d
	}
	h.n++
	if d < 0 {
		h.neg[bucket(uint64(-(d+1))+1)]++ // -(MinInt64) overflows; -(d+1)+1 does not
	} else {
		h.pos[bucket(uint64(d))]++
	}
}

// quantile is the q-quantile (0 < q <= 1): the value of rank ceil(q*n),
// within the bucket's precision and clamped to [min, max].
func (h *hist) quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var seen uint64
	v, found := int64(0), false
	for i := nBuckets - 1; i >= 0 && !found; i-- {
		if seen += h.neg[i]; seen >= rank {
			v, found = -int64(min(mid(i), math.MaxInt64)), true
		}
	}
	for i := 0; i < nBuckets && !found; i++ {
		if seen += h.pos[i]; seen >= rank {
			v, found = int64(min(mid(i), math.MaxInt64)), true
		}
	}
	return min(max(v, h.min), h.max)
}

// Delay is the distribution of one pair's one-way delays, in ns.
type Delay struct {
	Count int64 `json:"count"`
	Min   int64 `json:"min_ns"`
	P50   int64 `json:"p50_ns"`
	P90   int64 `json:"p90_ns"`
	P99   int64 `json:"p99_ns"`
	Max   int64 `json:"max_ns"`
}

func (h *hist) summary() Delay {
	if h.n == 0 {
		return Delay{}
	}
	return Delay{Count: h.n, Min: h.min, P50: h.quantile(0.5), P90: h.quantile(0.9), P99: h.quantile(0.99), Max: h.max}
}
