package store

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// newShared opens a Store in Shared mode on dir, closed at t's cleanup
// unless the test closed it.
func newShared(t *testing.T, dir string, cfg Config) *testCore {
	t.Helper()
	cfg.Dir, cfg.Shared = dir, true
	c := newCore(t, cfg)
	t.Cleanup(func() { c.Close() })
	return c
}

// agentState reads the state file of agent name in Shared mode.
func agentState(t *testing.T, dir, name string) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, AgentStateDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc stateDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	m := map[string]uint64{}
	for _, e := range doc.Instances {
		m[e.Instance] = e.LastSeq
	}
	return m
}

// writeBatches writes and commits batches from..to (10 packets each,
// packet k of batch seq numbered (seq-1)*10+k).
func writeBatches(t *testing.T, s *testSession, from, to uint64) {
	t.Helper()
	for seq := from; seq <= to; seq++ {
		if _, err := s.Batch(0, batchPayload(seq, int(seq-1)*10, 10)); err != nil {
			t.Fatalf("batch %d: %v", seq, err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatalf("commit %d: %v", seq, err)
		}
	}
}

// checkPackets checks that the agent directory holds packets 0..n-1
// exactly once, in closed files only.
func checkPackets(t *testing.T, dir string, n int) {
	t.Helper()
	if open, _ := files(t, dir); open != 0 {
		t.Errorf("%d unfinished files in %s", open, dir)
	}
	pkts, _ := readDir(t, dir)
	if len(pkts) != n {
		t.Fatalf("%d packets, want %d", len(pkts), n)
	}
	seen := map[int64]bool{}
	for _, p := range pkts {
		if seen[p.TS] {
			t.Fatalf("packet at %d twice", p.TS)
		}
		seen[p.TS] = true
	}
}

// TestSharedAgentLock: in Shared mode an agent is written by one Store
// at a time: another Store's Writer is refused with ErrBusy while the
// first holds it, gets it after Release with the marks the first saved
// (so it drops what the first wrote), and the first's Writer fails
// with ErrReleased; taking the agent back loads the marks the second
// raised.
func TestSharedAgentLock(t *testing.T) {
	dir := t.TempDir()
	var logA bytes.Buffer // written by a's goroutines: read only after a wrote
	var logMu sync.Mutex
	a := newShared(t, dir, Config{Logger: slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logA}, nil))})
	b := newShared(t, dir, Config{})
	h := hello("web", 1)
	sa, _, err := a.Begin(h, func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, sa, 1, 3)
	logMu.Lock()
	if strings.Contains(logA.String(), "damaged") {
		t.Errorf("taking an agent no one wrote yet reported its (missing) state file damaged:\n%s", logA.String())
	}
	logMu.Unlock()
	if _, _, err := b.Begin(h, func() {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("B takes an agent A holds: %v, want ErrBusy", err)
	}
	if _, _, err := b.Begin(hello("db", 2), func() {}); err != nil {
		t.Fatalf("B takes another agent: %v", err)
	}
	if err := a.Release("web"); err != nil {
		t.Fatal(err)
	}
	// Every batch of the published file is covered by the agent's state file.
	if got := agentState(t, dir, "web"); len(got) != 1 || slices.Collect(mapValues(got))[0] != 3 {
		t.Fatalf("state of web after A's release: %v, want one instance at 3", got)
	}
	if _, err := sa.Batch(0, batchPayload(4, 30, 10)); !errors.Is(err, ErrReleased) {
		t.Fatalf("A's Writer after Release: %v, want ErrReleased", err)
	}
	if err := sa.w.Commit(); !errors.Is(err, ErrReleased) {
		t.Fatalf("A's Commit after Release: %v, want ErrReleased", err)
	}
	sb, welcome, err := b.Begin(h, func() {})
	if err != nil || welcome.LastSeq != 3 {
		t.Fatalf("B after A's release: LastSeq %d (%v), want 3 from A's marks", welcome.LastSeq, err)
	}
	if dup, err := sb.Batch(0, batchPayload(3, 20, 10)); !dup || err != nil {
		t.Fatalf("B writes batch 3 again: dup %v (%v)", dup, err)
	}
	writeBatches(t, sb, 4, 5)
	if _, _, err := a.Begin(h, func() {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("A takes the agent B holds now: %v, want ErrBusy", err)
	}
	if err := b.Release("web"); err != nil {
		t.Fatal(err)
	}
	// A's instance was at 3 in memory: taking the agent raises it to B's 5.
	sa, welcome, err = a.Begin(h, func() {})
	if err != nil || welcome.LastSeq != 5 {
		t.Fatalf("A takes it back: LastSeq %d (%v), want 5 from B's marks", welcome.LastSeq, err)
	}
	writeBatches(t, sa, 6, 6)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	checkPackets(t, filepath.Join(dir, "web"), 60)
	if _, err := a.Writer("web"); !errors.Is(err, ErrReleased) {
		t.Errorf("Writer after Close: %v, want ErrReleased", err)
	}
}

func mapValues(m map[string]uint64) func(func(uint64) bool) {
	return func(yield func(uint64) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// helperEnv names the directory TestSharedHelperProcess writes to: set,
// the test is a writer process that TestSharedTakeOverAfterKill kills.
const helperEnv = "PCAPSYNC_STORE_SHARED_HELPER"

// TestSharedHelperProcess is not a test of its own: run by
// TestSharedTakeOverAfterKill as a separate process, it takes agent
// "crash" in Shared mode, commits batches 1..3, writes batch 4 without
// committing it, says "ready" and waits to be killed.
func TestSharedHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnv)
	if dir == "" {
		t.Skip("a helper process of TestSharedTakeOverAfterKill")
	}
	c, err := openCore(Config{Dir: dir, Shared: true, Fsync: FsyncNever})
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := c.Begin(hello("crash", 5), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, s, 1, 3)
	if _, err := s.Batch(0, batchPayload(4, 30, 10)); err != nil {
		t.Fatal(err)
	}
	s.w.mu.Lock()
	s.w.file.bw.Flush() // in the file, not committed
	s.w.mu.Unlock()
	fmt.Println("ready")
	time.Sleep(time.Minute) // killed long before
	t.Fatal("not killed")
}

// TestSharedTakeOverAfterKill: a writer process killed with SIGKILL
// while it holds an agent leaves a .part file; until it dies another
// Store is refused the agent, and then takes it, repairs the file
// before its Writer returns, and knows the batches in it.
func TestSharedTakeOverAfterKill(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSharedHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- nil
				return
			}
		}
		ready <- fmt.Errorf("helper ended without ready: %v", sc.Err())
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("helper not ready within 30s")
	}
	b := newShared(t, dir, Config{})
	if _, _, err := b.Begin(hello("crash", 5), func() {}); !errors.Is(err, ErrBusy) {
		t.Fatalf("taking the agent of a live writer: %v, want ErrBusy", err)
	}
	parts, _ := filepath.Glob(filepath.Join(dir, "crash", "*"+layout.PartSuffix))
	if len(parts) != 1 {
		t.Fatalf("%d .part files, want the helper's one", len(parts))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s, welcome, err := b.Begin(hello("crash", 5), func() {})
	if err != nil {
		t.Fatalf("taking the agent of a dead writer: %v", err)
	}
	// Batch 4 was written whole with its mark: the repair may keep it.
	if welcome.LastSeq != 3 && welcome.LastSeq != 4 {
		t.Fatalf("LastSeq %d after the repair, want 3 (or 4)", welcome.LastSeq)
	}
	if _, err := os.Stat(parts[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf(".part still there after the agent was taken: %v", err)
	}
	if got := agentState(t, dir, "crash"); len(got) != 1 || slices.Collect(mapValues(got))[0] != welcome.LastSeq {
		t.Fatalf("state of the agent after the repair: %v, want %d", got, welcome.LastSeq)
	}
	if dup, _ := s.Batch(0, batchPayload(3, 20, 10)); !dup {
		t.Fatal("batch 3 written again after the takeover")
	}
	writeBatches(t, s, welcome.LastSeq+1, 6)
	if err := b.Release("crash"); err != nil {
		t.Fatal(err)
	}
	checkPackets(t, filepath.Join(dir, "crash"), 60)
}

// TestSharedExclusiveUnchanged: without Shared, two Stores on one root
// lock nothing (as before Shared existed) and keep the one state file.
func TestSharedExclusiveUnchanged(t *testing.T) {
	dir := t.TempDir()
	a := newCore(t, Config{Dir: dir})
	sa, _, err := a.Begin(hello("web", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, sa, 1, 2)
	sa.End(true)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{LockDir, AgentStateDir} {
		if _, err := os.Stat(filepath.Join(dir, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s in exclusive mode: %v", p, err)
		}
	}
	if got := readState(t, dir); len(got) != 1 || got[0].LastSeq != 2 {
		t.Errorf("state file %v, want web at 2", got)
	}
}

// sharedFile is a closed file of the retention test: its agent, name
// and place in the order of last packets across agents.
type sharedFile struct {
	agent, name string
	order       int
}

// TestSharedRetentionLeader: two Stores on one root with a size limit:
// one deletes (the leader), the oldest files across both Stores'
// agents first, never a .part; once the leader is closed the other
// takes over and deletes, again oldest first across all agents.
func TestSharedRetentionLeader(t *testing.T) {
	testRetainOptions = func(o *retention.Options) { o.IndexCheck, o.Relist = 100*time.Millisecond, 500*time.Millisecond }
	t.Cleanup(func() { testRetainOptions = nil }) // after the Stores' cleanups
	const limit = 64 << 10
	cfg := Config{RotateSize: 32 << 10, Fsync: FsyncNever, Retain: RetainConfig{MaxBytes: limit, FreePercent: -1}}
	dir := t.TempDir()
	stores := []*testCore{newShared(t, dir, cfg), newShared(t, dir, cfg)}
	agents := []string{"alpha", "beta"}
	sessions := make([]*testSession, 2)
	var all []sharedFile
	// closeOne writes one file of 50 packets for store i, the order-th
	// file across both by its packets' times, and closes it.
	closeOne := func(i, order int) {
		t.Helper()
		s, _, err := stores[i].Begin(hello(agents[i], byte(i+1)), func() {})
		if err != nil {
			t.Fatal(err)
		}
		before, _ := filepath.Glob(filepath.Join(dir, agents[i], "*.pcapng"))
		seq := s.inst.LastSeq() + 1
		if _, err := s.Batch(0, batchPayload(seq, order*50, 50)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		s.End(true)
		after, _ := filepath.Glob(filepath.Join(dir, agents[i], "*.pcapng"))
		for _, p := range after {
			if !slices.Contains(before, p) {
				all = append(all, sharedFile{agents[i], filepath.Base(p), order})
			}
		}
		sessions[i] = s
	}
	for n := range 24 {
		closeOne(n%2, n)
	}
	// A third agent of the second Store with a file being written.
	sp, _, err := stores[1].Begin(hello("gamma", 3), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, sp, 1, 1)
	openPart, _ := filepath.Glob(filepath.Join(dir, "gamma", "*"+layout.PartSuffix))
	if len(openPart) != 1 {
		t.Fatalf("gamma: %v, want one .part", openPart)
	}

	// onDisk is the bytes of the data files below dir, closed and open.
	onDisk := func() int64 {
		var n int64
		for _, ag := range []string{"alpha", "beta", "gamma"} {
			ents, _ := os.ReadDir(filepath.Join(dir, ag))
			for _, e := range ents {
				if info, err := e.Info(); err == nil {
					n += info.Size()
				}
			}
		}
		return n
	}
	// (before the stores run: their retention deletes from then on)
	if u := onDisk(); u <= limit {
		t.Fatalf("%d bytes written, want more than the limit %d", u, limit)
	}
	cancels := make([]func(), 2)
	for i, c := range stores {
		ctx, cancel := context.WithCancel(context.Background())
		ran := make(chan struct{})
		go func() { c.Run(ctx); close(ran) }()
		cancels[i] = func() { cancel(); <-ran }
		t.Cleanup(cancels[i])
	}
	deleted := func(c *testCore) uint64 { return c.Retention().Files[retention.RuleSize].Load() }
	hi, _ := retention.Watermarks(limit, cfg.RotateSize, 0)
	// checkOldestFirst checks that every file deleted is older than every
	// file left but each agent's newest (which the size rule keeps), and,
	// when partOpen, that the file being written is there.
	checkOldestFirst := func(phase string, partOpen bool) {
		t.Helper()
		newest := map[string]int{}
		for _, f := range all {
			newest[f.agent] = max(newest[f.agent], f.order)
		}
		oldestLeft, newestGone := 1<<30, -1
		for _, f := range all {
			switch _, err := os.Stat(filepath.Join(dir, f.agent, f.name)); {
			case err != nil:
				newestGone = max(newestGone, f.order)
			case f.order != newest[f.agent]:
				oldestLeft = min(oldestLeft, f.order)
			}
		}
		if newestGone < 0 || newestGone > oldestLeft {
			t.Errorf("%s: newest file deleted is %d, oldest left %d: want some deleted, all older than those left", phase, newestGone, oldestLeft)
		}
		if _, err := os.Stat(openPart[0]); partOpen && err != nil {
			t.Errorf("%s: the file being written: %v", phase, err)
		}
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if u := onDisk(); u > hi {
			return fmt.Errorf("%d bytes on disk, above the high watermark %d", u, hi)
		}
		return nil
	})
	leader := -1
	for i, c := range stores {
		if c.RetainLeader() {
			leader = i
		}
	}
	if leader < 0 || stores[0].RetainLeader() == stores[1].RetainLeader() {
		t.Fatalf("leaders: %v, %v; want exactly one", stores[0].RetainLeader(), stores[1].RetainLeader())
	}
	other := 1 - leader
	if deleted(stores[leader]) == 0 || deleted(stores[other]) != 0 {
		t.Fatalf("files deleted: leader %d, other %d; want only the leader's", deleted(stores[leader]), deleted(stores[other]))
	}
	checkOldestFirst("first leader", true)
	t.Logf("leader %d deleted %d files", leader, deleted(stores[leader]))

	// The leader goes; the other takes over and deletes as its agent
	// writes on.
	cancels[leader]()
	if err := stores[leader].Close(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyTrue(t, 5*time.Second, "the other Store leads", stores[other].RetainLeader)
	for n := 24; n < 36; n++ {
		closeOne(other, n)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if deleted(stores[other]) == 0 {
			return errors.New("the new leader deleted nothing yet")
		}
		if u := onDisk(); u > hi {
			return fmt.Errorf("%d bytes on disk, above the high watermark %d", u, hi)
		}
		return nil
	})
	checkOldestFirst("second leader", leader == 0) // the second Store's Close closed it
	// The first leader's agent keeps its newest file (the size rule's floor).
	if _, err := os.Stat(filepath.Join(dir, agents[leader])); err == nil {
		if ents, _ := filepath.Glob(filepath.Join(dir, agents[leader], "*.pcapng")); len(ents) == 0 {
			t.Errorf("%s lost every file", agents[leader])
		}
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
