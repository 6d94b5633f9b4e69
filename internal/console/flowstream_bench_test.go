package console

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flowquery"
)

// BenchmarkFlowsStream: GET /api/flows' answer of a whole root
// (PCAPSYNC_BENCH_ROOT, read only; its first page of 100 flows, the
// total, the chart and the top lists, as JSON), built in one pass
// ((*local).Flows: flowStream over flowquery.Each) and as before it
// (every flow joined by flowquery.Run, then page, chartOf, topLists),
// in alternated rounds with `pcapsync flows --dir ROOT --top 10 --by
// bytes` (PCAPSYNC_BENCH_CLI): the wall and CPU time of each.
// BENCHMARKS.md, Issue 29.
func BenchmarkFlowsStream(b *testing.B) {
	root, cli, rounds := benchRoot(b)
	l := &local{dir: root, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	stream := func() []byte {
		a := l.Flows(ctx, url.Values{})
		body, err := json.Marshal(a.Body)
		if err != nil || a.Code != 200 {
			b.Fatalf("stream: %d %v %s", a.Code, err, body)
		}
		return body
	}
	joined := func() []byte {
		flows, res, err := flowquery.Run(ctx, flowquery.Config{Dir: root})
		if err != nil {
			b.Fatal(err)
		}
		tops, err := topLists(flows)
		if err != nil {
			b.Fatal(err)
		}
		pg := flowPage{Sort: "first", Limit: DefaultFlowRows}
		body, err := json.Marshal(map[string]any{"flows": pg.page(flows), "total": len(flows), "page": pg, "chart": chartOf(flows),
			"top_talkers": tops["top_talkers"], "top_conversations": tops["top_conversations"],
			"top_services": tops["top_services"], "coverage": flowCoverage(res, l.public)})
		if err != nil {
			b.Fatal(err)
		}
		return body
	}
	timeIt := func(f func() []byte) (time.Duration, time.Duration, []byte) {
		c0, t0 := cpuSelf(), time.Now()
		body := f()
		return time.Since(t0), cpuSelf() - c0, body
	}
	var walls, cpus [3][]time.Duration
	for b.Loop() {
		for r := range rounds {
			var sw, sc, jw, jc time.Duration
			var sb, jb []byte
			if r%2 == 0 { // each first in every other round
				sw, sc, sb = timeIt(stream)
				jw, jc, jb = timeIt(joined)
			} else {
				jw, jc, jb = timeIt(joined)
				sw, sc, sb = timeIt(stream)
			}
			if string(sb) != string(jb) {
				b.Fatalf("the answers differ:\n%.2000s\n%.2000s", sb, jb)
			}
			tw, tc := timed(b, cli, "flows", "--dir", root, "--top", "10", "--by", "bytes")
			for i, d := range [][2]time.Duration{{sw, sc}, {jw, jc}, {tw, tc}} {
				walls[i], cpus[i] = append(walls[i], d[0]), append(cpus[i], d[1])
			}
			b.Logf("round %d: one pass %v (CPU %v), joined %v (CPU %v), CLI --top %v (CPU %v); %d bytes", r+1, sw, sc, jw, jc, tw, tc, len(sb))
		}
	}
	for i, name := range []string{"one-pass", "joined", "cli-top"} {
		wm, wl, wh := spread(walls[i])
		cm, cl, ch := spread(cpus[i])
		b.Logf("%s: wall median %v (%v to %v), CPU median %v (%v to %v)", name, wm, wl, wh, cm, cl, ch)
		b.ReportMetric(float64(wm.Milliseconds()), name+"-ms")
		b.ReportMetric(float64(cm.Milliseconds()), name+"-cpu-ms")
	}
}
