package flowquery

import (
	"context"
	"os"
	"testing"
)

// BenchmarkRunTop runs RunTop (pcapsync flows --top 10) over the output
// root named by FLOWQUERY_BENCH_ROOT (the query benchmark's, for
// instance), grouped by FLOWQUERY_BENCH_GROUP (host by default); skipped
// without one. With -cpuprofile and -memprofile it shows where a --top
// over a real root spends.
func BenchmarkRunTop(b *testing.B) {
	dir := os.Getenv("FLOWQUERY_BENCH_ROOT")
	if dir == "" {
		b.Skip("FLOWQUERY_BENCH_ROOT not set")
	}
	group := os.Getenv("FLOWQUERY_BENCH_GROUP")
	if group == "" {
		group = GroupHost
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := RunTop(context.Background(), Config{Dir: dir}, group, ByBytes, 10); err != nil {
			b.Fatal(err)
		}
	}
}
