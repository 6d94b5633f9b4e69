package main

import (
	"fmt"
	"io"
	"strings"

	"golang.org/x/perf/benchfmt"
	"golang.org/x/perf/benchmath"
)

// stat is one metric of one benchmark over the -count runs: the median
// and benchstat's 95% confidence interval around it.
type stat struct {
	Median float64
	Range  string // e.g. "±3%", as benchstat prints it
	N      int
}

// results holds medians by benchmark name (without the "Benchmark"
// prefix and the GOMAXPROCS suffix, e.g. "Codec/batch/wire/encode")
// and unit as benchfmt tidies them: sec/op, B/op, allocs/op, B/s, and
// the benchmarks' own B/rec, overhead-B/rec and ratio.
type results struct {
	m     map[string]map[string]stat
	names []string          // in order of first appearance
	conf  map[string]string // file configuration (goos, cpu, ...)
}

// readResults reads go test -bench output (several -count runs).
func readResults(r io.Reader, name string) (*results, error) {
	vals := map[string]map[string][]float64{}
	res := &results{m: map[string]map[string]stat{}, conf: map[string]string{}}
	br := benchfmt.NewReader(r, name)
	for br.Scan() {
		switch rec := br.Result().(type) {
		case *benchfmt.SyntaxError:
			return nil, rec
		case *benchfmt.Result:
			for _, c := range rec.Config {
				if c.File {
					res.conf[c.Key] = string(c.Value)
				}
			}
			base, parts := rec.Name.Parts()
			var sb strings.Builder
			sb.Write(base)
			for _, p := range parts {
				if p[0] == '/' {
					sb.Write(p)
				}
			}
			key := sb.String()
			if vals[key] == nil {
				vals[key] = map[string][]float64{}
				res.names = append(res.names, key)
			}
			for _, v := range rec.Values {
				vals[key][v.Unit] = append(vals[key][v.Unit], v.Value)
			}
		}
	}
	if err := br.Err(); err != nil {
		return nil, err
	}
	if len(res.names) == 0 {
		return nil, fmt.Errorf("%s: no benchmark results", name)
	}
	for key, units := range vals {
		res.m[key] = map[string]stat{}
		for unit, v := range units {
			s := benchmath.AssumeNothing.Summary(benchmath.NewSample(v, &benchmath.DefaultThresholds), 0.95)
			res.m[key][unit] = stat{Median: s.Center, Range: s.PctRangeString(), N: len(v)}
		}
	}
	return res, nil
}

// get returns the median of unit for benchmark key; ok is false when
// the benchmark did not run (skipped: unsupported by the library).
func (r *results) get(key, unit string) (float64, bool) {
	s, ok := r.m[key][unit]
	return s.Median, ok
}

func (r *results) stat(key, unit string) (stat, bool) {
	s, ok := r.m[key][unit]
	return s, ok
}

// level returns the distinct values of the i-th name part (after the
// base) of the benchmarks named base/..., in order of appearance;
// prefix restricts to names starting with base/prefix.
func (r *results) level(base, prefix string, i int) []string {
	var out []string
	seen := map[string]bool{}
	for _, n := range r.names {
		parts := strings.Split(n, "/")
		if parts[0] != base || !strings.HasPrefix(n, base+"/"+prefix) || len(parts) <= i+1 {
			continue
		}
		if v := parts[i+1]; !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
