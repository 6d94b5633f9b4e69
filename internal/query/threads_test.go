package query

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
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
	part := onlyFile(t, dir, "d4", "*.pcapng.part")
	st, err := os.Stat(part)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(part, st.Size()-37); err != nil {
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
		reorder      int64
		ifaces       []string
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
		{name: "small windows", since: -1e9, until: all, reorder: 1},
		{name: "small windows filtered", filter: "udp port 5001", since: -1e9, until: all, reorder: 1},
		{name: "small windows count", since: -1e9, until: all, reorder: 1, count: 9000},
		{name: "small windows max bytes", since: -1e9, until: all, reorder: 1, maxBytes: 1_200_000},
		{name: "ifaces", ifaces: []string{"*:eth1"}, since: -1e9, until: all},
		{name: "ifaces count", ifaces: []string{"*:eth0"}, since: -1e9, until: all, count: 777},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run := func(threads int) ([]byte, Result, string) {
				cfg := Config{Dir: dir, Filter: c.filter, Agents: c.agents, Since: ts(c.since), NoIndex: c.noIndex,
					Count: c.count, MaxBytes: c.maxBytes, Threads: threads, ReorderMem: c.reorder, Ifaces: c.ifaces}
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
				if res1.Stopped != "" { // read-ahead and producers read past where the limit stopped
					res.BytesRead, res.FilesRead, res.FilesIndexed, res.FilesScanned = res1.BytesRead, res1.FilesRead, res1.FilesIndexed, res1.FilesScanned
					res.BlocksRead, res.BlocksSkipped, res.Coverage = res1.BlocksRead, res1.BlocksSkipped, res1.Coverage
				}
				if fmt.Sprint(res) != fmt.Sprint(res1) {
					t.Errorf("threads %d: result %+v; threads 1: %+v", n, res, res1)
				}
			}
			t.Logf("%d packets, %d bytes, %s; unselected %q", res1.Packets, len(one), err1, res1.Unselected)
		})
	}
}

// TestReadAheadBounded: a stream never holds more than aheadChunks
// chunks read ahead and not yet read, however slow the merge (the
// writer here) and however many threads: read-ahead memory is
// aheadChunks*aheadChunk per agent.
func TestReadAheadBounded(t *testing.T) {
	dir := t.TempDir()
	// 3 agents of about 1.7 MiB each (decompressed), 7 chunks apiece;
	// compressed: a plain file is read by its producer itself.
	for i, name := range []string{"r1", "r2", "r3"} {
		writeAgent(t, dir, agentSpec{name: name, comp: []string{"gzip", "zstd", "gzip"}[i], batches: hostBatches(60, 200, 1000, nil, 0)}, i)
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

// TestPlainNotReadAhead: with producers (Threads above 1), a plain
// file is read by its agent's producer itself, not copied ahead into
// chunks first; a compressed one is decompressed ahead.
func TestPlainNotReadAhead(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, agentSpec{name: "p1", batches: hostBatches(20, 200, 1000, nil, 0)}, 0)
	writeAgent(t, dir, agentSpec{name: "p2", comp: "zstd", batches: hostBatches(20, 200, 1000, nil, 1)}, 1)
	for _, c := range []struct {
		agent string
		ahead bool
	}{{"p1", false}, {"p2", true}} {
		var chunks atomic.Int64
		testAhead = func(int) { chunks.Add(1) }
		res, err := Run(t.Context(), Config{Dir: dir, Threads: 4, Agents: []string{c.agent}}, io.Discard)
		testAhead = nil
		if err != nil || res.Packets != 4000 {
			t.Fatalf("%s: %d packets, %v", c.agent, res.Packets, err)
		}
		if got := chunks.Load() > 0; got != c.ahead {
			t.Errorf("%s: %d chunks read ahead, want some: %v", c.agent, chunks.Load(), c.ahead)
		}
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

// TestThreadsDisorderSameOutput: an agent whose packets of every size
// come late by about what its window holds writes the same output and
// fails with the same ErrOutOfOrder (naming the same packets) with a
// producer per agent as in one goroutine: which packets a window
// releases depends on the packets read, not on which of its buffers
// the merge has given back yet.
func TestThreadsDisorderSameOutput(t *testing.T) {
	dir := t.TempDir()
	pads := []int{0, 200, 700, 1300, 40}
	var batches [][]tp
	var b []tp
	for i := range int64(30000) {
		p := tp{ts: i * 1000, iface: int(i % 2), port: 1, pad: pads[i*7%5]}
		if i%97 == 0 && i > 5000 {
			p.ts -= (150 + i*31%1000) * 1000 // late by 150 to 1150 packets
		}
		if b = append(b, p); len(b) == 1000 {
			batches, b = append(batches, b), nil
		}
	}
	writeAgent(t, dir, agentSpec{name: "z1", rotate: 1 << 20, batches: batches}, 0)
	writeAgent(t, dir, agentSpec{name: "z2", comp: "zstd", batches: batches[3:]}, 1)
	failed, passed := 0, 0
	for _, mem := range []int64{1, 600 << 10, 700 << 10, 800 << 10, 1200 << 10, 4 << 20} {
		var one []byte
		var err1 string
		for _, threads := range []int{1, 2, 8} {
			out, res, err := runQuery(t, Config{Dir: dir, ReorderMem: mem, Threads: threads})
			if threads == 1 {
				one, err1 = out, fmt.Sprint(err)
				if err != nil {
					failed++
				} else {
					passed++
				}
				t.Logf("window %d KiB: %d packets, %v", mem>>10, res.Packets, err)
				continue
			}
			if fmt.Sprint(err) != err1 {
				t.Errorf("window %d KiB, threads %d: error %v; threads 1: %s", mem>>10, threads, err, err1)
			}
			if !bytes.Equal(out, one) {
				t.Errorf("window %d KiB, threads %d: %d bytes differ from threads 1's %d", mem>>10, threads, len(out), len(one))
			}
		}
	}
	if failed == 0 || passed == 0 {
		t.Errorf("%d windows failed, %d passed: the disorder does not test the window's edge", failed, passed)
	}
}

// TestThreadsStatsAtStop: the statistics blocks of the files an
// agent's producer read before the packets where Count stopped the
// query are written, those it read after them not, as in one
// goroutine: the producer hands the merge each file's blocks with the
// number of packets the window had released when the file ended.
func TestThreadsStatsAtStop(t *testing.T) {
	dir := t.TempDir()
	writeAgent(t, dir, agentSpec{name: "s1", rotate: 16 << 10, stats: true, batches: hostBatches(40, 200, 1000, nil, 0)}, 0)
	writeAgent(t, dir, agentSpec{name: "s2", rotate: 24 << 10, stats: true, batches: hostBatches(40, 200, 1000, nil, 1)}, 1)
	for count := int64(3000); count < 3400; count += 5 {
		one, _, err1 := runQuery(t, Config{Dir: dir, ReorderMem: 1, Count: count, Threads: 1})
		out, _, err := runQuery(t, Config{Dir: dir, ReorderMem: 1, Count: count, Threads: 2})
		if err != nil || err1 != nil {
			t.Fatalf("count %d: %v, %v", count, err1, err)
		}
		if !bytes.Equal(out, one) {
			t.Fatalf("count %d: %d bytes differ from threads 1's %d", count, len(out), len(one))
		}
	}
}

// TestThreadsFileError: an agent's damaged file fails the query with
// the same error, after the same output, with producers as without.
func TestThreadsFileError(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"k1", "k2", "k3"} {
		writeAgent(t, dir, agentSpec{name: name, rotate: 64 << 10, batches: hostBatches(20, 100, 1000, nil, byte(i))}, i)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "k2", "*.pcapng"))
	if len(files) < 4 {
		t.Fatalf("k2: %q", files)
	}
	f, err := os.OpenFile(files[2], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xff}, 8192), 20<<10)
	f.Close()
	for _, noIndex := range []bool{false, true} {
		one, _, err1 := runQuery(t, Config{Dir: dir, Threads: 1, NoIndex: noIndex})
		if err1 == nil {
			t.Fatal("a damaged file read without an error")
		}
		for _, threads := range []int{2, 8} {
			out, _, err := runQuery(t, Config{Dir: dir, Threads: threads, NoIndex: noIndex})
			if fmt.Sprint(err) != fmt.Sprint(err1) {
				t.Errorf("threads %d: error %v; threads 1: %v", threads, err, err1)
			}
			if !bytes.Equal(out, one) {
				t.Errorf("threads %d: %d bytes differ from threads 1's %d", threads, len(out), len(one))
			}
		}
		t.Logf("no index %v: %d bytes, then %v", noIndex, len(one), err1)
	}
}

// TestThreadsStopNoLeak: a query that stops before its agents' files
// are read (Count, MaxBytes, its context ended, an agent's error, the
// function given the packets failing) returns with every goroutine it
// started ended: the producers stop.
func TestThreadsStopNoLeak(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"l1", "l2", "l3", "l4"} {
		writeAgent(t, dir, agentSpec{name: name, batches: hostBatches(40, 200, 1000, nil, byte(i))}, i)
	}
	errStop := errors.New("enough")
	for _, c := range []struct {
		name string
		cfg  Config
		stop int // packets, then the function fails (0: never)
	}{
		{name: "count", cfg: Config{Count: 10}},
		{name: "max bytes", cfg: Config{MaxBytes: 100 << 10}},
		{name: "cancelled", stop: -100},
		{name: "function fails", stop: 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cfg := c.cfg
			cfg.Dir, cfg.Threads = dir, 4
			p, err := Prepare(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			res, err := p.RunEach(ctx, io.Discard, func(*Packet) error {
				if n++; c.stop > 0 && n == c.stop {
					return errStop
				}
				if c.stop < 0 && n == -c.stop {
					cancel()
				}
				return nil
			})
			if res.Packets >= 8000 {
				t.Fatalf("%d packets: nothing stopped the query (%v)", res.Packets, err)
			}
			testutil.EventuallyTrue(t, 10*time.Second, "the query's goroutines end", func() bool { return runtime.NumGoroutine() <= before })
		})
	}
}
