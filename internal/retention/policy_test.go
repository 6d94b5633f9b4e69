package retention

import (
	"testing"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// TestWatermarks: the margin is a tenth of the limit or one rotation
// file, whichever is smaller; deletion starts half a margin below the
// limit, or earlier at a high write rate (at most a quarter of the
// limit), and stops half a margin lower.
func TestWatermarks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		limit, rotate int64
		rate          float64
		hi, lo        int64
		slack         int64
	}{
		{"a tenth of the limit", 100 * mib, 0, 0, 95 * mib, 90 * mib, 5 * mib},
		{"one rotation file", 100 * mib, 4 * mib, 0, 98 * mib, 96 * mib, 2 * mib},
		{"a slow writer changes nothing", 100 * mib, 4 * mib, 10 * mib, 98 * mib, 96 * mib, 2 * mib},
		{"a fast writer: 100 ms ahead", 100 * mib, 4 * mib, 100 * mib, 90 * mib, 88 * mib, 2 * mib},
		{"at most a quarter of the limit", 100 * mib, 4 * mib, 1000 * mib, 75 * mib, 73 * mib, 2 * mib},
	} {
		hi, lo := Watermarks(tc.limit, tc.rotate, tc.rate)
		if hi != tc.hi || lo != tc.lo {
			t.Errorf("%s: %d, %d MiB; want %d, %d", tc.name, hi/mib, lo/mib, tc.hi/mib, tc.lo/mib)
		}
		if s := slackOf(tc.limit, tc.rotate); s != tc.slack {
			t.Errorf("%s: slack %d, want %d", tc.name, s, tc.slack)
		}
	}
}

// TestFreeLimit: the most a filesystem may hold used under the free
// rule, by percentage or bytes; 0 when the rule is off.
func TestFreeLimit(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		size int64
		want int64
	}{
		{Config{FreePercent: 10}, 1000, 900},
		{Config{FreeBytes: 300}, 1000, 700},
		{Config{FreeBytes: 3000}, 1000, 0},
		{Config{FreePercent: -1}, 1000, 0},
		{Config{}, 1000, 0}, // withDefaults not applied: off
	} {
		if got := freeLimitOf(&tc.c, tc.size); got != tc.want {
			t.Errorf("%+v of %d: %d, want %d", tc.c, tc.size, got, tc.want)
		}
	}
}

// TestOldest: the oldest file that may go, keeping the newest when
// floor, only those older than before, never an excluded one.
func TestOldest(t *testing.T) {
	files := []layout.IndexedFile{{Name: "a", Last: 10}, {Name: "b", Last: 20}, {Name: "c", Last: 30}}
	none := func(string) bool { return false }
	for _, tc := range []struct {
		name     string
		files    []layout.IndexedFile
		floor    bool
		before   int64
		excluded func(string) bool
		want     int
	}{
		{"oldest", files, false, 0, none, 0},
		{"held skipped", files, false, 0, func(n string) bool { return n == "a" }, 1},
		{"newest kept under floor", files, true, 0, func(n string) bool { return n != "c" }, -1},
		{"newest may go without floor", files, false, 0, func(n string) bool { return n != "c" }, 2},
		{"older than before only", files, false, 20, func(n string) bool { return n == "a" }, -1},
		{"before", files, false, 11, none, 0},
		{"one file under floor", files[:1], true, 0, none, -1},
		{"none", nil, false, 0, none, -1},
	} {
		if got := oldest(tc.files, tc.floor, tc.before, tc.excluded); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
