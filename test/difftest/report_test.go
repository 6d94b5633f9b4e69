//go:build linux

package difftest

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// report logs the run's figures and its differences grouped by filter
// class, by link type, by mode, and by (kind, class, link) with the
// first few in full, and fails the test if there is any.
func (r *trial) report() {
	t := r.t
	t.Logf("difftest seed %d: captures %d (%d packets, every other one 3 times as many), filters %d, queries %d, differences %d, reorder-window refusals %d, in %s",
		r.seed, len(r.captures), *flagPackets, len(r.filters), r.queries, len(r.diffs), r.windows, time.Since(r.began).Round(time.Second))
	if len(r.diffs) == 0 {
		return
	}
	var b strings.Builder
	tally := func(title string, keyOf func(*diff) string) {
		n := map[string]int{}
		for _, d := range r.diffs {
			n[keyOf(d)]++
		}
		fmt.Fprintf(&b, "\n%s:\n", title)
		keys := slices.Collect(maps.Keys(n))
		slices.SortFunc(keys, func(a, b string) int { return cmp.Or(n[b]-n[a], strings.Compare(a, b)) })
		for _, k := range keys {
			fmt.Fprintf(&b, "  %6d  %s\n", n[k], k)
		}
	}
	tally("differences by filter class", func(d *diff) string { return d.class })
	tally("by link type", func(d *diff) string { return d.link })
	tally("by mode", func(d *diff) string { return d.mode })
	tally("by kind", func(d *diff) string { return d.kind })
	tally("by distinct filter and link type (modes together)", func(d *diff) string {
		return fmt.Sprintf("%-10s %-12s %q", d.class, d.link, d.filter)
	})
	groups := map[string][]*diff{}
	for _, d := range r.diffs {
		k := fmt.Sprintf("%s / %s / %s", d.kind, d.class, d.link)
		groups[k] = append(groups[k], d)
	}
	keys := slices.Sorted(maps.Keys(groups))
	fmt.Fprintf(&b, "\ngroups (kind / filter class / link type), the first %d of each:\n", *flagExamples)
	for _, k := range keys {
		g := groups[k]
		fmt.Fprintf(&b, "  %s: %d\n", k, len(g))
		for _, d := range g[:min(len(g), *flagExamples)] {
			fmt.Fprintf(&b, "    seed %d: %s\n", r.seed, d)
		}
	}
	if *flagKeep != "" {
		var lines strings.Builder
		for i, d := range r.diffs {
			fmt.Fprintf(&lines, "%05d\t%d\t%s\t%s\t%s\t%s\t%s\t%q\t%s\n", i+1, r.seed, d.kind, d.mode, d.class, d.link, d.capture, d.filter, d.detail)
		}
		if err := os.WriteFile(filepath.Join(r.work, "diffs.tsv"), []byte(lines.String()), 0o644); err != nil {
			t.Error(err)
		}
	}
	t.Errorf("%d differences from libpcap (seed %d):%s", len(r.diffs), r.seed, b.String())
}
