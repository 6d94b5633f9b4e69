//go:build linux

package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/metrics/metricstest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// deletion is one "retention deleted file" log line of a collector.
type deletion struct {
	agent, file, rule string
	bytes             int64
}

var (
	deletionRE = regexp.MustCompile(`(?m)^.*retention deleted file.*$`)
	logFieldRE = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)
)

// deletions parses the deletion lines of a collector's log.
func deletions(t *testing.T, log string) []deletion {
	t.Helper()
	var ds []deletion
	for _, line := range deletionRE.FindAllString(log, -1) {
		f := map[string]string{}
		for _, m := range logFieldRE.FindAllStringSubmatch(line, -1) {
			f[m[1]] = strings.Trim(m[2], `"`)
		}
		n, err := strconv.ParseInt(f["bytes"], 10, 64)
		if err != nil || f["agent"] == "" || f["file"] == "" || f["rule"] == "" {
			t.Errorf("deletion line without agent, file, bytes or rule: %s", line)
			continue
		}
		ds = append(ds, deletion{agent: f["agent"], file: f["file"], rule: f["rule"], bytes: n})
	}
	return ds
}

// dirWatch polls the agent directories below a collector's root every
// 2 ms: the peak bytes of each agent (closed and open files, as on
// disk) and the last size seen of each closed file.
type dirWatch struct {
	mu     sync.Mutex
	peak   map[string]int64 // agent: its files' bytes at most
	closed map[string]int64 // agent/name of a closed file: its size
	stop   chan struct{}
	done   chan struct{}
}

func watchDirs(t *testing.T, root string) *dirWatch {
	t.Helper()
	w := &dirWatch{peak: map[string]int64{}, closed: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			w.look(root)
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *dirWatch) look(root string) {
	agents, _ := os.ReadDir(root)
	for _, a := range agents {
		if !a.IsDir() || strings.HasPrefix(a.Name(), ".") {
			continue
		}
		files, _ := os.ReadDir(filepath.Join(root, a.Name()))
		var sum int64
		sizes := map[string]int64{}
		for _, f := range files {
			if info, err := f.Info(); err == nil { // else deleted meanwhile
				sizes[f.Name()] = info.Size()
				sum += info.Size()
			}
		}
		w.mu.Lock()
		for name, size := range sizes {
			// A closed file's bytes, as retention counts them: with its
			// index, published before it. The largest seen: a closed
			// file does not change, but a look racing its deletion may
			// find the index already gone.
			if !strings.HasSuffix(name, ".part") && !besideFile(name) {
				k := a.Name() + "/" + name
				w.closed[k] = max(w.closed[k], size+sizes[index.Path(name)]+sizes[flow.Path(name)])
			}
		}
		w.peak[a.Name()] = max(w.peak[a.Name()], sum)
		w.mu.Unlock()
	}
}

// end stops the polling; the maps may be read after it.
func (w *dirWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// TestRetentionRules: the per-agent limit, and retention on compressed
// files. One noisy agent streams about four times --retain-agent-size
// (paced, 3 s) beside two quiet ones well under it: the noisy agent's
// files never exceed the limit by more than one rotation file and keep
// its newest packets, contiguous; the quiet agents keep all their
// history; every deletion names rule agent and the noisy agent. With
// --file-compress zstd the same holds counting the compressed files on
// disk, and with gzip under --retain-size for the whole root: each
// file deleted is a whole compressed file, published (never the .part
// being written), deleted with the size it had on disk; what is left
// reads in tshark and capinfos.
func TestRetentionRules(t *testing.T) {
	requireTools(t, checkTools...)
	const (
		noisyN = 60_000 // IMIX: about 22 MB of pcapng
		quietN = 2_000  // about 0.75 MB: under every limit here
		rotate = 1 << 20
	)
	tmp := t.TempDir()
	noisySrc := filepath.Join(tmp, "noisy.pcap")
	writeGenFile(t, noisySrc, gen.FileConfig{Count: noisyN, Mix: gen.MixIMIX, Stream: 100, Seed: 100})
	quietSrc := make([]string, 2)
	for i := range quietSrc {
		quietSrc[i] = filepath.Join(tmp, fmt.Sprintf("quiet%d.pcap", i))
		writeGenFile(t, quietSrc[i], gen.FileConfig{Count: quietN, Mix: gen.MixIMIX, Stream: uint32(101 + i), Seed: uint64(101 + i)})
	}
	tests := []struct {
		name     string
		flags    []string
		suffix   string // of every data file
		rule     string
		agentMax int64 // the noisy agent's files at most (limit + one rotation file); 0: not checked
		rootMax  int64 // all agents' files at most; 0: not checked
	}{
		{name: "agent-size", flags: []string{"--retain-agent-size", "6M"}, suffix: ".pcapng", rule: "agent",
			agentMax: 6<<20 + rotate},
		{name: "agent-size-zstd", flags: []string{"--retain-agent-size", "6M", "--file-compress", "zstd"}, suffix: ".pcapng.zst",
			rule: "agent", agentMax: 6<<20 + rotate},
		{name: "size-gzip", flags: []string{"--retain-size", "8M", "--file-compress", "gzip"}, suffix: ".pcapng.gz",
			rule: "size", rootMax: 8<<20 + rotate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t)
			_, dir := retainMount(t, retainTmpfs)
			addr := freeport.Addr(t)
			coll := startCollector(t, ctx, "", addr, dir, append([]string{"--rotate-size", "1M", "--retain-free", "0"}, tt.flags...)...)
			w := watchDirs(t, dir)
			var rootPeak int64
			stopRoot := peak(func() int64 {
				var n int64
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
						n += treeSize(filepath.Join(dir, e.Name()))
					}
				}
				return n
			})
			quiet := make([]*proc, len(quietSrc))
			for i, src := range quietSrc {
				quiet[i] = startReplay(t, ctx, addr, fmt.Sprintf("quiet%d", i), src)
			}
			for _, q := range quiet {
				finishReplay(t, q, quietN, 60*time.Second)
			}
			in := startPacedInput(t, ctx, noisySrc, filepath.Join(t.TempDir(), "in.fifo"), 3*time.Second)
			in.releaseTail()
			noisy := startReplay(t, ctx, addr, "noisy", in.path, "--batch-size", "256K")
			expectNoReconnects(t, noisy, finishReplay(t, noisy, noisyN, 120*time.Second))
			coll.stop(20 * time.Second)
			rootPeak = stopRoot()
			w.end()
			if cs := coll.collectorSummary(); cs.FileErrors != 0 {
				t.Errorf("collector counted %d file errors", cs.FileErrors)
			}
			log := coll.stderr.String()
			if strings.Contains(log, "retention cannot free enough") {
				t.Errorf("collector logged that retention cannot free enough")
			}

			ds := deletions(t, log)
			if len(ds) == 0 {
				t.Fatalf("nothing deleted")
			}
			var deletedBytes int64
			for _, d := range ds {
				deletedBytes += d.bytes
				if d.rule != tt.rule {
					t.Errorf("deleted %s/%s by rule %s, want %s", d.agent, d.file, d.rule, tt.rule)
				}
				if tt.rule == "agent" && d.agent != "noisy" {
					t.Errorf("deleted %s/%s of a quiet agent", d.agent, d.file)
				}
				if !strings.HasSuffix(d.file, tt.suffix) || strings.HasSuffix(d.file, ".part") {
					t.Errorf("deleted %s/%s: want a closed %s file", d.agent, d.file, tt.suffix)
				}
				if size, ok := w.closed[d.agent+"/"+d.file]; !ok {
					t.Errorf("deleted %s/%s, never seen published", d.agent, d.file)
				} else if size != d.bytes {
					t.Errorf("deleted %s/%s as %d bytes; it had %d on disk", d.agent, d.file, d.bytes, size)
				}
			}
			t.Logf("%d files (%.1f MiB) deleted; peak of the noisy agent %.2f MiB, of the root %.2f MiB",
				len(ds), float64(deletedBytes)/(1<<20), float64(w.peak["noisy"])/(1<<20), float64(rootPeak)/(1<<20))
			if tt.agentMax > 0 && w.peak["noisy"] > tt.agentMax {
				t.Errorf("the noisy agent's files peaked at %d bytes, over its limit plus one rotation file (%d)", w.peak["noisy"], tt.agentMax)
			}
			if tt.rootMax > 0 && rootPeak > tt.rootMax {
				t.Errorf("the root peaked at %d bytes, over its limit plus one rotation file (%d)", rootPeak, tt.rootMax)
			}

			r := checkAgentDir(t, filepath.Join(dir, "noisy"))
			for _, f := range r.Files {
				if !strings.HasSuffix(f, tt.suffix) {
					t.Errorf("%s: want a %s file", f, tt.suffix)
				}
			}
			if first := expectNewestQuiet(t, "noisy", r, 100, noisyN); first == 0 {
				t.Errorf("noisy: nothing of it deleted")
			}
			for i := range quietSrc {
				name := fmt.Sprintf("quiet%d", i)
				rq := checkAgentDir(t, filepath.Join(dir, name))
				if tt.rule == "agent" {
					rq.expectExactlyOnce(t, name, map[uint32]uint64{uint32(101 + i): quietN})
				} else {
					expectNewestQuiet(t, name, rq, uint32(101+i), quietN)
				}
			}
		})
	}
}

var firstPacketRE = regexp.MustCompile(`(?m)^First packet time:\s*([0-9.]+)\s*$`)

// firstPacket is the time of the first packet of the capture file at
// path, as capinfos reads it.
func firstPacket(t *testing.T, path string) time.Time {
	t.Helper()
	out := runTool(t, "capinfos", "-a", "-S", path)
	m := firstPacketRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("capinfos -a -S %s: no first packet time in:\n%s", path, out)
	}
	sec, frac, _ := strings.Cut(m[1], ".")
	s, err1 := strconv.ParseInt(sec, 10, 64)
	frac = (frac + "000000000")[:9]
	ns, err2 := strconv.ParseInt(frac, 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("capinfos first packet time %q", m[1])
	}
	return time.Unix(s, ns).UTC()
}

// TestRetentionMetrics: after another process fills the disk under a
// collector keeping 10% free, its metrics say what retention did, to
// the file and the byte: files and bytes deleted by rule equal the
// deletions it logged, the bytes in use equal the agents' files on
// disk, the bytes free equal statfs, and each agent's oldest packet is
// the first packet of its oldest file left (capinfos); pcapsync status
// shows that oldest packet. When the filler takes all that is left,
// the "cannot free enough" gauge and counter rise and pcapsync status
// says so.
func TestRetentionMetrics(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const count = 60_000 // IMIX: about 22 MB of pcapng
	tmp := t.TempDir()
	srcs := []string{filepath.Join(tmp, "m0.pcap"), filepath.Join(tmp, "m1.pcap")}
	for i, src := range srcs {
		writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: uint32(110 + i), Seed: uint64(110 + i)})
	}
	mnt, dir := retainMount(t, retainTmpfs)
	addr := freeport.Addr(t)
	maddr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--rotate-size", "2M", "--retain-free", "10%", "--metrics", maddr)
	for i, src := range srcs {
		finishReplay(t, startReplay(t, ctx, addr, fmt.Sprintf("m%d", i), src), count, 60*time.Second)
	}
	waitNoPart(t, dir, 10*time.Second)

	// The filler leaves 4 MiB less free than the rule keeps: files of
	// both agents go, oldest first.
	filler := filepath.Join(mnt, "filler")
	fill(t, filler, retainTmpfs-usedBytes(mnt)-(retainTmpfs/10-4<<20))
	coll.waitMetricTotal(10*time.Second, 2, deletedFilesMetric)

	// At rest the metrics match the directory exactly.
	// Retention does not count the timeline summaries (a few KiB beside
	// each closed file, written after its bytes are recorded:
	// docs/index.md), so the agents' files here are the rest.
	agentsBytes := func() int64 {
		n := treeSize(filepath.Join(dir, "m0")) + treeSize(filepath.Join(dir, "m1"))
		sums, _ := filepath.Glob(filepath.Join(dir, "m[01]", "*"+index.BinsSuffix))
		for _, p := range sums {
			if fi, err := os.Stat(p); err == nil {
				n -= fi.Size()
			}
		}
		return n
	}
	var m metricstest.Families
	testutil.Eventually(t, 10*time.Second, func() error {
		before, err := coll.metricTotal(deletedFilesMetric)
		if err != nil {
			return err
		}
		m = scrapeMetrics(t, maddr)
		var fs unix.Statfs_t
		if err := unix.Statfs(dir, &fs); err != nil {
			t.Fatal(err)
		}
		inUse := agentsBytes()
		if after, err := coll.metricTotal(deletedFilesMetric); err != nil || after != before {
			return fmt.Errorf("still deleting (%v)", err)
		}
		if got := m.Value(t, "pcapsync_collector_retention_root_bytes"); got != float64(inUse) {
			return fmt.Errorf("root bytes %v, the agents' files %d", got, inUse)
		}
		if got, want := m.Value(t, "pcapsync_collector_filesystem_avail_bytes"), float64(int64(fs.Bavail)*fs.Bsize); got != want {
			return fmt.Errorf("bytes free %v, statfs %v", got, want)
		}
		// Done deleting: the used bytes are under the free rule's high
		// watermark (a deletion round that began while the filler was
		// still being written stopped short of it).
		used := float64((int64(fs.Blocks) - int64(fs.Bavail)) * fs.Bsize)
		if high, err := m.Lookup("pcapsync_collector_retention_high_watermark_bytes", "rule=free"); err != nil || used > high {
			return fmt.Errorf("used %v, over the high watermark %v (%v)", used, high, err)
		}
		return nil
	})
	ds := deletions(t, coll.stderr.String())
	var files, bytes float64
	for _, d := range ds {
		if d.rule != "free" {
			t.Errorf("deleted %s/%s by rule %s, want free", d.agent, d.file, d.rule)
		}
		files++
		bytes += float64(d.bytes)
	}
	m.Expect(t, "collector", []metricstest.Want{
		{Name: "pcapsync_collector_retention_deleted_files_total", Labels: []string{"rule=free"}, Value: files},
		{Name: "pcapsync_collector_retention_deleted_bytes_total", Labels: []string{"rule=free"}, Value: bytes},
		{Name: "pcapsync_collector_retention_deleted_files_total", Labels: []string{"rule=size"}, Value: 0},
		{Name: "pcapsync_collector_retention_deleted_files_total", Labels: []string{"rule=age"}, Value: 0},
		{Name: "pcapsync_collector_retention_deleted_files_total", Labels: []string{"rule=agent"}, Value: 0},
		{Name: "pcapsync_collector_retention_short", Labels: []string{"rule=free"}, Value: 0},
		{Name: "pcapsync_collector_retention_short_total", Value: 0},
	})
	// The free rule's limit is the filesystem's size less 10%.
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	size := int64(st.Blocks) * st.Bsize
	limit := m.Value(t, "pcapsync_collector_retention_limit_bytes", "rule=free")
	high := m.Value(t, "pcapsync_collector_retention_high_watermark_bytes", "rule=free")
	low := m.Value(t, "pcapsync_collector_retention_low_watermark_bytes", "rule=free")
	if want := float64(int64(float64(size) * 0.9)); limit != want {
		t.Errorf("retention_limit_bytes{rule=free} %v, want %v (90%% of %d)", limit, want, size)
	}
	if !(low < high && high < limit) {
		t.Errorf("free rule: low %v, high %v, limit %v: want low < high < limit", low, high, limit)
	}
	if _, err := m.Lookup("pcapsync_collector_retention_limit_bytes", "rule=size"); err == nil {
		t.Error("retention_limit_bytes{rule=size} exported with --retain-size off")
	}
	oldest := map[string]time.Time{}
	for i := range srcs {
		name := fmt.Sprintf("m%d", i)
		ents := dirEntries(t, filepath.Join(dir, name)) // sorted: names carry the time they were opened
		if len(ents) == 0 {
			t.Fatalf("agent %s has no file left", name)
		}
		oldest[name] = firstPacket(t, filepath.Join(dir, name, ents[0]))
		got := m.Value(t, "pcapsync_collector_agent_oldest_packet_timestamp_seconds", "agent="+name)
		if want := float64(oldest[name].UnixNano()) / 1e9; math.Abs(got-want) > 1e-6 {
			t.Errorf("%s: oldest packet %v in the metrics, %v (%s) by capinfos of %s", name, got, want, oldest[name], ents[0])
		}
	}
	t.Logf("%v files (%.1f MiB) deleted; oldest kept %v", files, bytes/(1<<20), oldest)
	status := func() string {
		t.Helper()
		p := startProc(t, ctx, "status", "", "status", "--collector-admin", maddr)
		if code := p.wait(10 * time.Second); code != 0 {
			t.Fatalf("pcapsync status exited with %d", code)
		}
		return p.stdout.String()
	}
	table := status()
	for name, ts := range oldest {
		// OLDEST KEPT, then the VERSION column.
		re := fmt.Sprintf(`(?m)^%s +.* %s( |$)`, name, regexp.QuoteMeta(ts.Format("2006-01-02T15:04:05Z")))
		if !regexp.MustCompile(re).MatchString(table) {
			t.Errorf("status table: no row matches %s:\n%s", re, table)
		}
	}
	if strings.Contains(table, "RETENTION CANNOT FREE ENOUGH") {
		t.Errorf("status says retention cannot free enough while it can:\n%s", table)
	}

	// The filler takes all that is left: only each agent's newest file
	// stays, and the collector says it cannot free enough.
	fillUntil(t, filler, 20*time.Second, func() error {
		if got := scrapeMetrics(t, maddr).Value(t, "pcapsync_collector_retention_short", "rule=free"); got != 1 {
			return fmt.Errorf("retention_short{rule=free} is %v", got)
		}
		return nil
	})
	m = scrapeMetrics(t, maddr)
	if got := m.Value(t, "pcapsync_collector_retention_short_total"); got < 1 {
		t.Errorf("retention_short_total %v, want at least 1", got)
	}
	for _, rule := range []string{"age", "agent", "size"} {
		if got := m.Value(t, "pcapsync_collector_retention_short", "rule="+rule); got != 0 {
			t.Errorf("retention_short{rule=%s} %v, want 0", rule, got)
		}
	}
	for i := range srcs {
		name := fmt.Sprintf("m%d", i)
		if ents := dirEntries(t, filepath.Join(dir, name)); len(ents) != 1 {
			t.Errorf("agent %s keeps %d files, want its newest only", name, len(ents))
		}
	}
	table = status()
	if !regexp.MustCompile(`(?m)^RETENTION CANNOT FREE ENOUGH \(rules: free\)`).MatchString(table) {
		t.Errorf("status table does not say retention cannot free enough:\n%s", table)
	}
	os.Remove(filler)
	coll.stop(20 * time.Second)
	if !strings.Contains(coll.stderr.String(), "retention cannot free enough") {
		t.Errorf("the collector did not log that retention cannot free enough")
	}
}
