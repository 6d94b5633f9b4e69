package console

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/roottest"
	"github.com/pcapsync/pcapsync/internal/timeline"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// BenchmarkTimeline: GET /api/timeline (through the handler, JSON
// included) of 24 h of 100 agents (PCAPSYNC_BENCH_AGENTS), written by
// the real store: a file an hour per agent, each of 720 packets (one
// every 5 s, 64–191 bytes) in index blocks of 8 KiB, its statistics
// at its close; the default step (1 min: 1440 points). BENCHMARKS.md,
// Issue 29.
func BenchmarkTimeline(b *testing.B) {
	agents := 100
	if s := os.Getenv("PCAPSYNC_BENCH_AGENTS"); s != "" {
		agents, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := store.Open(store.Config{Dir: dir, Fsync: store.FsyncNever, IndexBlock: 8 << 10})
	if err != nil {
		b.Fatal(err)
	}
	for ai := range agents {
		name := "agent" + strconv.Itoa(ai)
		w, err := st.Writer(name)
		if err != nil {
			b.Fatal(err)
		}
		inst := st.Instance([16]byte{byte(ai), byte(ai >> 8), 1}, name)
		for hour := range 24 {
			w.Start("host-" + name)
			i0, err := w.AddInterface(wire.Interface{Name: "eth0", LinkType: 1, SnapLen: 65535})
			if err != nil {
				b.Fatal(err)
			}
			at := base.Add(time.Duration(hour) * time.Hour)
			roottest.WriteBatches(b, w, inst, []int{i0}, 720, 60, func(i int) (int64, uint32, []byte) {
				return at.Add(time.Duration(i) * 5 * time.Second).UnixNano(), 0,
					gen.Frame(make([]byte, 64+i%128), gen.LinkTypeEthernet, uint32(ai), uint64(hour*720+i))
			})
			if _, err := w.RecordStats(&wire.Stats{Time: at.Add(time.Hour - time.Second).UnixNano(), AgentDrops: uint64(hour),
				Interfaces: []wire.IfaceStats{{Index: 0, KernelDrops: uint64(2 * hour)}}}, []int{i0}); err != nil {
				b.Fatal(err)
			}
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.Close(ctx); err != nil {
		b.Fatal(err)
	}
	h, err := New(Config{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	path := "/api/timeline?since=" + base.Format(time.RFC3339) + "&until=" + base.Add(24*time.Hour).Format(time.RFC3339)
	tl, err := BuildTimeline(ctx, dir, nil, base, base.Add(24*time.Hour), timeline.DefaultStep(24*time.Hour))
	if err != nil || len(tl.Agents) != agents || sumPtr(tl.Agents[0].Packets) != 24*720 || sum(tl.Agents[0].Drops) != 3*23 ||
		tl.Coverage.Files != 24*agents {
		b.Fatalf("the day's timeline: %v, %d agents, coverage %+v", err, len(tl.Agents), tl.Coverage)
	}
	b.Logf("%d agents, %d files, %d blocks, %d index and statistics bytes read", agents, tl.Coverage.Files, tl.Coverage.Blocks, tl.Coverage.IndexRead)
	b.Run("day", func(b *testing.B) {
		var n int
		for b.Loop() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if rec.Code != http.StatusOK {
				b.Fatalf("%d %s", rec.Code, rec.Body)
			}
			n = rec.Body.Len()
		}
		b.ReportMetric(float64(n), "answer-bytes")
	})
}
