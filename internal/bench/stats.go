package bench

import (
	"os"
	"slices"
	"time"
)

// median returns the median of xs (the mean of the middle two for an
// even count); 0 for none. xs is sorted in place.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// quartile returns quartile k (1 or 3) of xs, which must be sorted:
// the median of the values below (k 1) or above (k 3) the middle (the one value, of one); 0
// for none.
func quartile(xs []float64, k int) float64 {
	h := len(xs) / 2
	if h == 0 {
		return median(slices.Clone(xs))
	}
	if k == 1 {
		return median(slices.Clone(xs[:h]))
	}
	return median(slices.Clone(xs[len(xs)-h:]))
}

// medianOf returns the median of f over rounds.
func medianOf[T any](rounds []T, f func(T) float64) float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = f(r)
	}
	return median(xs)
}

// percentile returns the p-th percentile (0..100, nearest rank) of ds,
// which must be sorted; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(p/100*float64(len(ds))+0.5) - 1
	i = min(max(i, 0), len(ds)-1)
	return ds[i]
}

// fileSize returns the size of the file at path.
func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
