//go:build linux

package e2e

import (
	"math/rand/v2"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestCollectorKill9UnderLoad is TestCollectorKill9 with ten times the
// bytes per second (IMIX at 40 000 packets/s, 4 MiB batches: each reaches the file in about four write calls, so a kill can fall between them) into a
// collector that syncs every batch (--fsync batch), killed 50-250 ms
// after each reconnect: kills land inside writes and syncs, and repair
// has torn tails to cut. Every packet exactly once. The same with
// compressed files (--file-compress gzip and zstd), whose repair cuts
// torn gzip members and rewrites torn zstd frames.
func TestCollectorKill9UnderLoad(t *testing.T) {
	requireTools(t, checkTools...)
	// The fastest levels: under -race the binary compresses several
	// times slower, and kills must still land between commits.
	for _, fc := range []string{"none", "gzip:1", "zstd:1"} {
		t.Run(fc, func(t *testing.T) { testKill9UnderLoad(t, fc) })
	}
}

func testKill9UnderLoad(t *testing.T, fileCompress string) {
	ctx := testContext(t)
	const (
		stream   = 43
		name     = "load9"
		minKills = 5
	)
	count, batch, feed := 200_000, "4M", 5*time.Second // IMIX, ~70 MB
	if fileCompress != "none" {
		// A quarter of the rate, smaller batches: a compressing
		// collector built with -race cannot keep up with 40 000
		// packets/s, and what this tests is the repair of torn
		// compressed files (kills between and inside commits), not speed.
		// Each restart repairs the torn file (gzip: decodes it), so
		// kills come slower: feed for longer to land enough of them.
		count, batch, feed = 50_000, "256K", 8*time.Second
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "imix.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: uint64(count), Mix: gen.MixIMIX, Stream: stream, Seed: 43})
	in := startPacedInput(t, ctx, src, filepath.Join(tmp, "in.fifo"), feed)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("kill delays drawn from seed %d", seed)

	start := func() *proc {
		return startCollector(t, ctx, "", addr, dir, "--fsync", "batch", "--file-compress", fileCompress)
	}
	coll := start()
	colls := []*proc{coll}
	agent := startReplay(t, ctx, addr, name, in.path, "--batch-size", batch)
	kills := 0
	for !in.fed.Load() && kills < 60 {
		// Kill soon after the agent is back and writing.
		if err := coll.awaitSessions(1, 10*time.Second); err != nil {
			break // the agent finished before reconnecting
		}
		time.Sleep(time.Duration(50+rng.IntN(200)) * time.Millisecond) // the seeded moment of the kill, not a wait for an event
		if agent.exited() {
			break
		}
		coll.signal(syscall.SIGKILL)
		coll.wait(10 * time.Second)
		kills++
		coll = start()
		colls = append(colls, coll)
	}
	in.finish(t)
	s := finishReplay(t, agent, uint64(count), 60*time.Second)
	coll.stop(20 * time.Second)
	if kills < minKills {
		t.Fatalf("only %d kills landed before the replay finished; want %d", kills, minKills)
	}
	r := checkAgentDir(t, filepath.Join(dir, name))
	want := map[uint32]uint64{stream: uint64(count)}
	r.expectExactlyOnce(t, name, want)
	lost, dup, unexpected := r.tally(want)
	repaired, cut, removed := repairCounts(colls)
	t.Logf("RELIABILITY: collector SIGKILL under full load (%d IMIX packets in %v, --batch-size %s, --fsync batch, --file-compress %s): "+
		"kills survived %d, packets sent %d, lost %d, duplicated %d, unexpected %d, files %d, agent reconnects %d; "+
		"unfinished files repaired %d (%d cut back), removed %d",
		count, feed, batch, fileCompress, kills, s.Sent, lost, dup, unexpected, len(r.Files), s.Reconnects, repaired, cut, removed)
}
