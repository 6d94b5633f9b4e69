//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

const (
	retainTmpfs  = 64 << 20
	retainRotate = 2 << 20
)

// retainMount mounts a tmpfs of size bytes and returns the collector's
// directory on it; the mount goes at cleanup.
func retainMount(t *testing.T, size int64) (mnt, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "needs root to mount a small tmpfs (run go test as root)")
	}
	mnt = t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	dir = filepath.Join(mnt, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return mnt, dir
}

// usedBytes is what the filesystem holding dir has in use.
func usedBytes(dir string) int64 {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return 0
	}
	return int64(st.Blocks-st.Bavail) * st.Bsize
}

// peak polls usage every 2 ms until stop is called, which returns the
// highest value seen.
func peak(usage func() int64) (stop func() int64) {
	var hi atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			if u := usage(); u > hi.Load() {
				hi.Store(u)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() int64 { close(done); wg.Wait(); return hi.Load() }
}

// TestRetention: three agents stream several times a 64 MiB tmpfs
// through one collector with retention on, each at 25 MB/s (paced,
// where the watermarks alone keep usage under the limit) or as fast as
// they go (about 800 MB/s into the tmpfs on two busy cores, a 2 MiB
// file every 2.5 ms, where the write gate holds writers back while a
// deletion waits for a CPU), and once with the collector killed and
// restarted onto the nearly full disk. No agent drops or
// reconnects for lack of space, the collector reports no file error,
// usage never exceeds its limit by more than one rotation file, what
// is left of each agent is exactly its newest packets, contiguous, and
// every file reads in tshark and capinfos.
func TestRetention(t *testing.T) {
	requireTools(t, checkTools...)
	const count = 200_000 // IMIX: about 75 MB of pcapng per agent
	tmp := t.TempDir()
	srcs := make([]string, 3)
	for i := range srcs {
		srcs[i] = filepath.Join(tmp, fmt.Sprintf("in%d.pcap", i))
		writeGenFile(t, srcs[i], gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(70 + i), Seed: uint64(70 + i)})
	}
	tests := []struct {
		name    string
		flags   []string
		pace    time.Duration // each agent's input over this long; 0: as fast as it goes
		restart bool
		limit   func(dir string) int64 // the usage the rule bounds, and its limit
		usage   func(dir string) int64
		rule    string
	}{
		{name: "free", flags: []string{"--retain-free", "10%"}, rule: "free", pace: 3 * time.Second,
			usage: usedBytes, limit: func(string) int64 { return retainTmpfs * 9 / 10 }},
		{name: "size", flags: []string{"--retain-size", "24M"}, rule: "size", pace: 3 * time.Second,
			usage: treeSize, limit: func(string) int64 { return 24 << 20 }},
		{name: "free-unpaced", flags: []string{"--retain-free", "10%"}, rule: "free",
			usage: usedBytes, limit: func(string) int64 { return retainTmpfs * 9 / 10 }},
		{name: "size-unpaced", flags: []string{"--retain-size", "24M"}, rule: "size",
			usage: treeSize, limit: func(string) int64 { return 24 << 20 }},
		{name: "free-restart", flags: []string{"--retain-free", "10%"}, rule: "free", restart: true, pace: 3 * time.Second,
			usage: usedBytes, limit: func(string) int64 { return retainTmpfs * 9 / 10 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			_, dir := retainMount(t, retainTmpfs)
			addr := freeport.Addr(t)
			args := append([]string{"--rotate-size", "2M"}, tt.flags...)
			colls := []*proc{startCollector(t, ctx, "", addr, dir, args...)}
			stop := peak(func() int64 { return tt.usage(dir) })
			agents := make([]*proc, len(srcs))
			for i, src := range srcs {
				if tt.pace > 0 {
					in := startPacedInput(t, ctx, src, filepath.Join(t.TempDir(), "in.fifo"), tt.pace)
					in.releaseTail()
					src = in.path
				}
				agents[i] = startReplay(t, ctx, addr, fmt.Sprintf("r%d", i), src, "--batch-size", "256K")
			}
			if tt.restart {
				colls[0].waitMetricTotal(60*time.Second, 10, deletedFilesMetric)
				colls[0].signal(syscall.SIGKILL)
				colls[0].wait(10 * time.Second)
				colls = append(colls, startCollector(t, ctx, "", addr, dir, args...))
			}
			for i, a := range agents {
				s := finishReplay(t, a, count, 120*time.Second)
				if !tt.restart {
					expectNoReconnects(t, a, s)
				}
				if s.Dropped != 0 {
					t.Errorf("agent %d dropped %d packets", i, s.Dropped)
				}
			}
			last := colls[len(colls)-1]
			last.stop(20 * time.Second)
			hi := stop()
			cs := last.collectorSummary()
			if cs.FileErrors != 0 {
				t.Errorf("collector counted %d file errors", cs.FileErrors)
			}
			for i, c := range colls {
				for _, bad := range []string{"no space left", "storage error", "retention cannot free enough"} {
					if strings.Contains(c.stderr.String(), bad) {
						t.Errorf("collector run %d logged %q", i, bad)
					}
				}
			}
			limit := tt.limit(dir)
			t.Logf("peak usage %.1f MiB, limit %.1f MiB, rotation %d MiB; %d deletions logged", float64(hi)/(1<<20), float64(limit)/(1<<20),
				retainRotate>>20, strings.Count(colls[0].stderr.String()+last.stderr.String(), "rule="+tt.rule))
			if hi > limit+retainRotate {
				t.Errorf("usage peaked at %d bytes, more than one rotation file (%d) over the limit %d", hi, retainRotate, limit)
			}
			if n := strings.Count(last.stderr.String(), "rule="+tt.rule); n == 0 && !tt.restart {
				t.Errorf("no deletion logged with rule=%s", tt.rule)
			}
			if tt.restart && !strings.Contains(last.stderr.String(), "retention: indexed closed files") {
				t.Errorf("the restarted collector did not index the files present before")
			}
			var kept uint64
			for i := range srcs {
				r := checkAgentDir(t, filepath.Join(dir, fmt.Sprintf("r%d", i)))
				first := expectNewestQuiet(t, fmt.Sprintf("agent r%d", i), r, uint32(70+i), count)
				if first == 0 {
					t.Errorf("agent r%d: nothing deleted", i)
				}
				kept += count - first
			}
			t.Logf("kept %d of %d packets", kept, 3*count)
		})
	}
}

// expectNewestQuiet is expectNewest for a directory that lost its
// oldest packets by design: only the kept range is checked.
func expectNewestQuiet(t *testing.T, what string, r *dirReport, stream uint32, n uint64) uint64 {
	t.Helper()
	first := n
	for k := range r.Counts {
		if k.stream == stream {
			first = min(first, k.seq)
		}
	}
	want := map[key]bool{}
	for seq := first; seq < n; seq++ {
		want[key{stream, seq}] = true
	}
	for k, c := range r.Counts {
		if !want[k] || c != 1 {
			t.Errorf("%s: packet %v there %d times; want packets %d..%d once each", what, k, c, first, n-1)
			return first
		}
	}
	if len(r.Counts) != len(want) || r.Other > 0 || len(r.Corrupt) > 0 {
		t.Errorf("%s: %d packets, want the %d of %d..%d (other %d, corrupt %d)", what, len(r.Counts), len(want), first, n-1, r.Other, len(r.Corrupt))
	}
	return first
}

// TestRetentionAge: with --retain-age 1h, an agent whose packets are
// two hours old keeps none of its closed files past the rule, while an
// agent whose packets are from now keeps everything.
func TestRetentionAge(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const count = 50_000
	tmp := t.TempDir()
	now := time.Now()
	old, fresh := filepath.Join(tmp, "old.pcap"), filepath.Join(tmp, "fresh.pcap")
	writeGenFile(t, old, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: 80, Seed: 80, Start: now.Add(-2 * time.Hour).UnixNano()})
	writeGenFile(t, fresh, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: 81, Seed: 81, Start: now.UnixNano()})
	_, dir := retainMount(t, retainTmpfs)
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--rotate-size", "2M", "--retain-age", "1h")
	for _, a := range []*proc{startReplay(t, ctx, addr, "old", old), startReplay(t, ctx, addr, "fresh", fresh)} {
		finishReplay(t, a, count, 60*time.Second)
	}
	// The old agent's closed files go at the next tick after they close.
	testutil.Eventually(t, 10*time.Second, func() error {
		if ents, _ := os.ReadDir(filepath.Join(dir, "old")); len(ents) > 0 { // indexes too
			return fmt.Errorf("old agent still has %d files", len(ents))
		}
		return nil
	})
	coll.stop(20 * time.Second)
	if n := strings.Count(coll.stderr.String(), "rule=age"); n == 0 {
		t.Errorf("no deletion logged with rule=age")
	}
	r := checkAgentDir(t, filepath.Join(dir, "fresh"))
	r.expectExactlyOnce(t, "fresh agent", map[uint32]uint64{81: count})
	if cs := coll.collectorSummary(); cs.FileErrors != 0 {
		t.Errorf("collector counted %d file errors", cs.FileErrors)
	}
}

// TestRetentionFiller: another process fills the disk under a
// collector keeping 10% free: retention deletes the agent's oldest
// files first, then, with only the newest left, says loudly that it
// cannot free enough; writes then fail as on a full disk and nothing
// unwritten is acknowledged; once the filler goes, everything arrives.
func TestRetentionFiller(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const count = 80_000 // IMIX: about 30 MB of pcapng
	tmp := t.TempDir()
	src, src2 := filepath.Join(tmp, "in.pcap"), filepath.Join(tmp, "in2.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: 90, Seed: 90})
	writeGenFile(t, src2, gen.FileConfig{Count: 20_000, Mix: gen.MixIMIX, Stream: 91, Seed: 91})
	mnt, dir := retainMount(t, retainTmpfs)
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--rotate-size", "2M", "--retain-free", "10%")
	finishReplay(t, startReplay(t, ctx, addr, "a", src), count, 60*time.Second)
	waitNoPart(t, dir, 10*time.Second)
	before := checkFinishedFiles(t, filepath.Join(dir, "a"))
	if strings.Contains(coll.stderr.String(), "retention deleted file") {
		t.Fatalf("retention deleted files before the filler")
	}

	// The filler leaves 1 MiB less free than the rule keeps: over the
	// limit (so over the high watermark whatever the recent write rate
	// made it), the oldest go.
	filler := filepath.Join(mnt, "filler")
	fill(t, filler, retainTmpfs-usedBytes(mnt)-(retainTmpfs/10-1<<20))
	coll.waitMetric(10*time.Second, 1, deletedFilesMetric, "rule=free")
	waitDeletionsSettled(t, coll, 10*time.Second) // the files are read next
	waitNoPart(t, dir, 10*time.Second)
	r := checkFinishedFiles(t, filepath.Join(dir, "a"))
	first := expectNewestQuiet(t, "after the filler", r, 90, count)
	if first == 0 || len(r.Files) >= len(before.Files) {
		t.Errorf("after the filler: %d of %d files left, first packet %d: want the oldest deleted", len(r.Files), len(before.Files), first)
	}

	// The filler takes all that is left, again and again as retention
	// frees space: retention deletes down to the newest file and says it
	// cannot free enough.
	fillUntil(t, filler, 20*time.Second, func() error {
		if n, err := coll.metricTotal("pcapsync_collector_retention_short_total"); err != nil || n == 0 {
			return fmt.Errorf("retention has not found it cannot free enough (%v)", err)
		}
		return nil
	})
	if !strings.Contains(coll.stderr.String(), "retention cannot free enough") {
		t.Errorf("retention did not say it cannot free enough")
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if ents := dirEntries(t, filepath.Join(dir, "a")); len(ents) != 1 {
			return fmt.Errorf("agent a has %d files, want its newest only", len(ents))
		}
		return nil
	})
	// Another agent now finds a full disk: nothing is acknowledged.
	b := startReplay(t, ctx, addr, "b", src2, "--batch-size", "64K")
	coll.waitMetric(20*time.Second, 1, "pcapsync_collector_file_errors_total")
	if b.exited() {
		t.Fatalf("agent b finished on a full disk")
	}
	os.Remove(filler)
	finishReplay(t, b, 20_000, 60*time.Second)
	coll.stop(20 * time.Second)
	rb := checkAgentDir(t, filepath.Join(dir, "b"))
	rb.expectExactlyOnce(t, "agent b", map[uint32]uint64{91: 20_000})
	ra := checkAgentDir(t, filepath.Join(dir, "a"))
	expectNewestQuiet(t, "agent a at the end", ra, 90, count)
}

// fillUntil appends to the file filler until the filesystem is full,
// again and again as space is freed, until done returns nil (polled as
// testutil.Eventually does, for up to d).
// deletedFilesMetric counts retention's deletions, by rule.
const deletedFilesMetric = "pcapsync_collector_retention_deleted_files_total"

// waitDeletionsSettled waits until coll has deleted no file for a
// second: retention deletes what one round chooses one file after the
// other, and a test that reads the files meanwhile sees them vanish.
func waitDeletionsSettled(t *testing.T, coll *proc, d time.Duration) {
	t.Helper()
	last, since := -1.0, time.Now()
	testutil.Eventually(t, d, func() error {
		n, err := coll.metricTotal(deletedFilesMetric)
		if err != nil {
			return err
		}
		if n != last {
			last, since = n, time.Now()
			return fmt.Errorf("%v deletions so far", n)
		}
		if time.Since(since) < time.Second {
			return fmt.Errorf("%v deletions, the last less than a second ago", n)
		}
		return nil
	})
}

func fillUntil(t *testing.T, filler string, d time.Duration, done func() error) {
	t.Helper()
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	testutil.Eventually(t, d, func() error {
		for {
			if _, err := f.Write(buf); err != nil {
				break // ENOSPC: full for now
			}
		}
		return done()
	})
}
