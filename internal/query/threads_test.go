package query

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
)

// threadsRoot is indexedAgents' root (plain, gzip, zstd and zstd of a
// frame per block, closed and .part, small index blocks) with h8, a
// plain agent whose timestamps are a1's (ties between agents on every
// packet), copied in, and d4's .part cut inside its last block (a
// truncated tail).
func threadsRoot(t *testing.T) string {
	t.Helper()
	dir := indexedAgents(t)
	own := t.TempDir()
	writeAgent(t, own, agentSpec{name: "h8", rotate: 48 << 10, stats: true, ixBlock: 4096,
		batches: hostBatches(40, 50, 10_000, map[int]bool{3: true}, 7)}, 7)
	os.MkdirAll(filepath.Join(dir, "h8"), 0o750)
	files, _ := filepath.Glob(filepath.Join(own, "h8", "*"))
	if len(files) < 4 {
		t.Fatalf("h8: %q", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "h8", filepath.Base(f)), b, 0o640)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "d4", "*.pcapng.part"))
	if len(parts) != 1 {
		t.Fatalf("d4: %q", parts)
	}
	st, err := os.Stat(parts[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(parts[0], st.Size()-37); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestThreadsSameOutput: a query with read-ahead and its output written
// by a goroutine (Config.Threads above 1) writes byte for byte what
// it writes in one goroutine (Threads 1), comments and statistics
// included, with the same Result and error, over agents of every
// compression, through the index and scanning, with filters, time
// ranges, ties between agents, a truncated .part, Count and MaxBytes.
func TestThreadsSameOutput(t *testing.T) {
	dir := threadsRoot(t)
	all := int64(math.MaxInt64 - base)
	cases := []struct {
		name         string
		filter       string
		since, until int64
		agents       []string
		noIndex      bool
		count        int64
		maxBytes     int64
	}{
		{name: "all", since: -1e9, until: all},
		{name: "all scanned", since: -1e9, until: all, noIndex: true},
		{name: "needle", filter: "ip host 10.9.9.7", since: -1e9, until: all},
		{name: "needle scanned", filter: "ip host 10.9.9.7", since: -1e9, until: all, noIndex: true},
		{name: "ties", agents: []string{"a1", "h8"}, since: -1e9, until: all},
		{name: "across files", since: 2_000_000, until: 12_000_000},
		{name: "broad", filter: "udp port 5001 or udp port 5002", since: 1_000_000, until: 9_000_000},
		{name: "negation scanned", filter: "not port 5001", since: 4_000_000, until: all, noIndex: true},
		{name: "edges", since: 1_230_000, until: 1_230_000 + 10_001},
		{name: "count", since: -1e9, until: all, count: 1234},
		{name: "max bytes", since: -1e9, until: all, maxBytes: 200_000},
		{name: "nothing", filter: "ip host 10.9.9.99", since: -1e9, until: all},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(threads int) ([]byte, Result, string) {
				cfg := Config{Dir: dir, Filter: c.filter, Agents: c.agents, Since: ts(c.since), NoIndex: c.noIndex,
					Count: c.count, MaxBytes: c.maxBytes, Threads: threads}
				if c.until != all {
					cfg.Until = ts(c.until)
				}
				out, res, err := runQuery(t, cfg)
				return out, res, fmt.Sprint(err)
			}
			one, res1, err1 := run(1)
			if res1.Packets == 0 && c.name != "nothing" {
				t.Fatalf("no packets: %+v, %s", res1, err1)
			}
			for _, n := range []int{2, 3, 8} {
				if n == 3 { // chunks that end inside blocks
					aheadChunk = 4096 + 13
				}
				out, res, err := run(n)
				aheadChunk = 256 << 10
				if err != err1 {
					t.Errorf("threads %d: error %q; threads 1: %q", n, err, err1)
				}
				if !bytes.Equal(out, one) {
					t.Errorf("threads %d: %d bytes differ from threads 1's %d (%s; %s)", n, len(out), len(one), res, res1)
				}
				if res1.Stopped != "" { // read-ahead read past where the limit stopped
					res.BytesRead = res1.BytesRead
				}
				if fmt.Sprint(res) != fmt.Sprint(res1) {
					t.Errorf("threads %d: result %+v; threads 1: %+v", n, res, res1)
				}
			}
			t.Logf("%d packets, %d bytes, %s", res1.Packets, len(one), err1)
		})
	}
}

// TestReadAheadBounded: a stream never holds more than aheadChunks
// chunks read ahead and not yet read, however slow the merge (the
// writer here) and however many threads: read-ahead memory is
// aheadChunks*aheadChunk per agent.
func TestReadAheadBounded(t *testing.T) {
	dir := t.TempDir()
	// 3 agents of about 1.7 MiB each, 7 chunks apiece.
	for i, name := range []string{"r1", "r2", "r3"} {
		writeAgent(t, dir, agentSpec{name: name, batches: hostBatches(60, 200, 1000, nil, 0)}, i)
	}
	var worst, total atomic.Int64
	testAhead = func(filled int) {
		total.Add(1)
		for w := worst.Load(); int64(filled) > w && !worst.CompareAndSwap(w, int64(filled)); w = worst.Load() {
		}
	}
	defer func() { testAhead = nil }()
	var out slowWriter
	if _, err := Run(t.Context(), Config{Dir: dir, Threads: 8}, &out); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d chunks read ahead, at most %d of a stream waiting", total.Load(), worst.Load())
	if total.Load() < 3*6 {
		t.Errorf("%d chunks read ahead: the files were not read ahead", total.Load())
	}
	if w := worst.Load(); w > aheadChunks || w < 2 {
		t.Errorf("a stream held %d chunks read ahead, the bound is %d (and some must wait)", w, aheadChunks)
	}
}

// slowWriter is an io.Writer that yields on every write, so the
// read-ahead gets ahead of the merge.
type slowWriter struct{ n int64 }

func (w *slowWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	for range 50 {
		runtime.Gosched()
	}
	return len(p), nil
}

// TestOutputErrorWithThreads: a writer that fails part way fails the
// query with its error, with the output written by a goroutine as in
// one goroutine, and what reached the writer before is the same.
func TestOutputErrorWithThreads(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, agentSpec{name: "e1", batches: hostBatches(20, 200, 1000, nil, 0)}, 0)
	errFull := errors.New("disk full")
	var first []byte
	for _, threads := range []int{1, 2, 4} {
		w := &failWriter{left: 300 << 10, err: errFull}
		res, err := Run(t.Context(), Config{Dir: dir, Threads: threads}, w)
		if !errors.Is(err, errFull) {
			t.Fatalf("threads %d: %v (%s), want the writer's error", threads, err, res)
		}
		if first == nil {
			first = w.got
		} else if !bytes.Equal(w.got, first) {
			t.Errorf("threads %d: the writer got %d bytes, with one thread %d", threads, len(w.got), len(first))
		}
	}
}

// failWriter takes left bytes, then fails with err.
type failWriter struct {
	left int
	err  error
	got  []byte
}

func (w *failWriter) Write(p []byte) (int, error) {
	n := min(len(p), w.left)
	w.got = append(w.got, p[:n]...)
	w.left -= n
	if n < len(p) {
		return n, w.err
	}
	return n, nil
}
