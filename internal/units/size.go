// Package units reads the quantities flags and query parameters take:
// byte sizes.
package units

import (
	"fmt"
	"strings"
)

// ParseSize reads a byte size: a whole number with an optional suffix
// K, M, G, T (powers of 1024; KiB, MiB, ... too) or KB, MB, GB, TB
// (powers of 1000), like "64M" or "1GiB". At most 2^62. Its errors
// wrap ErrSyntax or ErrRange.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	} {
		if rest, ok := strings.CutSuffix(t, u.suffix); ok {
			t, mult = rest, u.mult
			break
		}
	}
	var n int64
	if _, err := fmt.Sscan(t, &n); err != nil || n < 0 || fmt.Sprint(n) != strings.TrimSpace(t) {
		return 0, fmt.Errorf("size %q: %w", s, ErrSyntax)
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("size %q is %w", s, ErrRange)
	}
	return n * mult, nil
}
