//go:build linux

package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestCollectorRestart stops the collector (SIGTERM) in the middle of a
// replay and starts it again on the same port and directory: the agent
// reconnects, resends what was not acknowledged and exits 0 with every
// packet acknowledged, and the output holds every packet exactly once
// across the files of both collector runs.
func TestCollectorRestart(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		count     = 400_000
		stream    = 31
		threshold = 20 << 20 // output bytes before the collector is stopped
	)
	in := filepath.Join(t.TempDir(), "imix.pcap")
	writeGenFile(t, in, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: 3})

	dir := t.TempDir()
	agentDir := filepath.Join(dir, "restart1")
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir)
	agent := startReplay(t, ctx, addr, "restart1", in)

	testutil.Eventually(t, 30*time.Second, func() error {
		if n := treeSize(agentDir); n > threshold {
			return nil
		} else if agent.exited() {
			return fmt.Errorf("agent exited before the output reached %d bytes (it holds %d): too fast to interrupt: %w", threshold, n, testutil.ErrGiveUp)
		} else {
			return fmt.Errorf("output at %d bytes, want over %d", n, threshold)
		}
	})
	t.Logf("stopping the collector at %d output bytes", treeSize(agentDir))
	coll.stop(20 * time.Second)
	first := coll.collectorSummary()
	if agent.exited() {
		t.Fatalf("agent exited while the collector was down (summary %q); nothing was resent", agent.stdout.String())
	}
	time.Sleep(300 * time.Millisecond) // the collector's downtime, the subject: the agent's reconnects fail meanwhile
	coll2 := startCollector(t, ctx, "", addr, dir)

	s := finishReplay(t, agent, count, 45*time.Second)
	if s.Reconnects == 0 {
		t.Errorf("agent summary %+v: no reconnect counted", s)
	}
	coll2.stop(20 * time.Second)
	second := coll2.collectorSummary()
	t.Logf("first collector: %+v", first)
	t.Logf("second collector: %+v", second)
	t.Logf("agent: %+v", s)

	if got := agentDirs(t, dir); !slices.Equal(got, []string{"restart1"}) {
		t.Errorf("collector dir holds %q, want only [restart1]", got)
	}
	r := checkAgentDir(t, agentDir)
	if len(r.Files) < 2 {
		t.Errorf("want a file per collector run, got %q", r.Files)
	}
	r.expectExactlyOnce(t, "restart1", map[uint32]uint64{stream: count})
	if got := first.Packets + second.Packets; got != uint64(r.Packets) {
		t.Errorf("collectors counted %d + %d packets written, files hold %d", first.Packets, second.Packets, r.Packets)
	}
}
