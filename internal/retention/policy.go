package retention

import (
	"cmp"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// The policy: which files go and when, as functions of file metadata,
// limits and the write rate only. The Enforcer (retention.go) applies
// them to its index of the root.

// Watermarks returns where deletion for limit starts (hi) and where it
// stops (lo), for files rotated at rotate bytes (0: no rotation) and
// writers writing rate bytes/s at their recent peak. The margin is a
// tenth of the limit or one rotation file, whichever is smaller; hi is
// below the limit by half the margin or by what the writers write in
// deleteLead at rate (at most a quarter of the limit), whichever is
// more, and lo is half the margin below hi.
func Watermarks(limit, rotate int64, rate float64) (hi, lo int64) {
	m := limit / 10
	if rotate > 0 {
		m = min(m, rotate)
	}
	lead := min(int64(rate*deleteLead.Seconds()), limit/4)
	hi = limit - max(m/2, lead)
	return hi, hi - m/2
}

// deleteLead is how long deleting may lag behind writing: at a high
// write rate deletion starts that much earlier. A deletion on a busy
// machine waits for a CPU after its unlink; tens of milliseconds are
// seen with every core busy writing.
const deleteLead = 100 * time.Millisecond

// slackOf is how far the write gate lets usage go past limit: half the
// margin of Watermarks (a tenth of the limit or one rotation file,
// whichever is smaller).
func slackOf(limit, rotate int64) int64 {
	m := limit / 10
	if rotate > 0 {
		m = min(m, rotate)
	}
	return m / 2
}

// freeLimitOf returns the most a filesystem of size bytes may hold
// used under c's free rule (0: the rule is off). c has its defaults.
func freeLimitOf(c *Config, size int64) int64 {
	switch {
	case c.FreeBytes > 0:
		return max(size-c.FreeBytes, 0)
	case c.FreePercent > 0:
		return int64(float64(size) * (100 - c.FreePercent) / 100)
	}
	return 0
}

// fileOrder is the order files go in: oldest last packet first, then
// by name.
func fileOrder(a, b layout.IndexedFile) int {
	return cmp.Or(cmp.Compare(a.Last, b.Last), cmp.Compare(a.Name, b.Name))
}

// oldest returns the index in files (in fileOrder) of the first file
// that may go: not the newest when floor, with its last packet before
// before when before is not 0, and not excluded (held by a reader, or
// skipped this round); -1 when none may.
func oldest(files []layout.IndexedFile, floor bool, before int64, excluded func(name string) bool) int {
	n := len(files)
	if floor {
		n--
	}
	for i := 0; i < n; i++ {
		f := files[i]
		if before != 0 && f.Last >= before {
			return -1
		}
		if excluded(f.Name) {
			continue
		}
		return i
	}
	return -1
}
