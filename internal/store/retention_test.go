package store

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
)

const mib = 1 << 20

// fakeFS is a filesystem of size bytes whose use is what the retainers
// on it hold (their index and open files) plus other.
type fakeFS struct {
	size, other int64
	rs          []*retainer
}

func (f *fakeFS) statfs(string) (int64, int64, error) {
	used := f.other
	for _, r := range f.rs {
		used += r.rootBytes()
	}
	return f.size, f.size - used, nil
}

// tf is a closed test file: agent, number (its name), MiB, last packet
// (minutes after t0; its first packet a minute earlier).
type tf struct {
	agent string
	n     int
	mib   int64
	last  int
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (f tf) name() string { return f.agent + "/" + string(rune('a'+f.n)) + ".pcapng" }

// newTestRetainer returns a retainer on a new directory holding files
// (empty on disk: only the index's sizes count), each agent with an
// open file of open MiB.
func newTestRetainer(t *testing.T, rc RetainConfig, rotate int64, files []tf, open map[string]int64, logw io.Writer) *retainer {
	t.Helper()
	dir := t.TempDir()
	var errs atomic.Uint64
	r := newRetainer(Config{RotateSize: rotate, Retain: rc, Logger: slog.New(slog.NewTextHandler(logw, nil))}, dir, &errs)
	for _, f := range files {
		path := filepath.Join(dir, f.name())
		os.MkdirAll(filepath.Dir(path), 0o750)
		if err := os.WriteFile(path, nil, 0o640); err != nil {
			t.Fatal(err)
		}
		a := r.agent(f.agent)
		last := t0.Add(time.Duration(f.last) * time.Minute).UnixNano()
		a.closed(filepath.Base(path), f.mib*mib, 1, layout.TimeRange{Min: last - int64(time.Minute), Max: last, OK: true}, true)
	}
	for name, n := range open {
		r.agent(name).wrote(n*mib, 1)
	}
	return r
}

// left returns the files of dir's agents still on disk, sorted.
func left(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		fs, _ := os.ReadDir(filepath.Join(dir, e.Name()))
		for _, f := range fs {
			got = append(got, e.Name()+"/"+f.Name())
		}
	}
	slices.Sort(got)
	return got
}

func names(fs ...tf) []string {
	var s []string
	for _, f := range fs {
		s = append(s, f.name())
	}
	slices.Sort(s)
	return s
}

// TestRetentionRules: each rule deletes the oldest files by last packet
// (across agents, or the agent's own), stops at its low watermark,
// keeps each agent's newest file (size, free), skips held and
// unpublished files, and says when it cannot free enough.
func TestRetentionRules(t *testing.T) {
	a1, a2, a3 := tf{"a", 1, 4, 10}, tf{"a", 2, 4, 20}, tf{"a", 3, 4, 30}
	b1, b2, b3 := tf{"b", 1, 4, 5}, tf{"b", 2, 4, 25}, tf{"b", 3, 4, 35}
	all := []tf{a1, a2, a3, b1, b2, b3}
	noFree := RetainConfig{FreePercent: -1}
	tests := []struct {
		name    string
		rc      RetainConfig
		fs      *fakeFS // nil: 1 GiB, nothing else on it
		open    map[string]int64
		hold    []tf
		part    []tf // published yet: only layout.PartSuffix on disk
		want    []tf // left
		short   RetainRule
		isShort bool
	}{
		{name: "within every limit", rc: RetainConfig{MaxBytes: 100 * mib}, want: all},
		// Limit 32 MiB, margin 3.2: hi 30.4, lo 28.8. 24 MiB closed + 8
		// open = 32: b1 (the oldest) goes, 28 is below lo.
		{name: "size: oldest across agents", rc: RetainConfig{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "size: above the high watermark", rc: RetainConfig{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 7}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "size: below the high watermark nothing goes", rc: RetainConfig{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 6}, want: all},
		{name: "size: each agent's newest stays; short", rc: RetainConfig{MaxBytes: 16 * mib, FreePercent: -1},
			open: map[string]int64{"a": 5, "b": 4}, want: []tf{a3, b3}, short: RuleSize, isShort: true},
		{name: "size: at the limit with only the newest left is not short", rc: RetainConfig{MaxBytes: 16 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a3, b3}, short: RuleSize},
		{name: "size: held file skipped", rc: RetainConfig{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, hold: []tf{b1}, want: []tf{a2, a3, b1, b2, b3}},
		{name: "size: unpublished file skipped", rc: RetainConfig{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, part: []tf{b1}, want: []tf{a2, a3, b1, b2, b3}},
		// Agent a: limit 20, margin 2 (a rotation file): hi 19, lo 18.
		// 12 closed + 10 open = 22: its own oldest goes, not b's older b1.
		{name: "agent: only the noisy agent's own", rc: RetainConfig{AgentBytes: 20 * mib, FreePercent: -1},
			open: map[string]int64{"a": 10}, want: []tf{a2, a3, b1, b2, b3}},
		// At t0+90m, 1h: every file whose last packet is before t0+30m.
		{name: "age: older than the cutoff", rc: RetainConfig{MaxAge: time.Hour, FreePercent: -1},
			want: []tf{a3, b3}},
		{name: "age: the newest too", rc: RetainConfig{MaxAge: 50 * time.Minute, FreePercent: -1},
			want: []tf{}},
		// 100 MiB filesystem, 10% free: limit 90, hi 88 (margin 4), lo 86.
		// 24 closed + 8 open + 57 other = 89: delete b1 (oldest) -> 85.
		{name: "free: oldest first", rc: RetainConfig{}, fs: &fakeFS{size: 100 * mib, other: 57 * mib},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "free: bytes", rc: RetainConfig{FreeBytes: 10 * mib}, fs: &fakeFS{size: 100 * mib, other: 57 * mib},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "free: another program fills the disk; newest kept; short", rc: RetainConfig{},
			fs: &fakeFS{size: 100 * mib, other: 85 * mib}, open: map[string]int64{"a": 4, "b": 4},
			want: []tf{a3, b3}, short: RuleFree, isShort: true},
		{name: "free: off", rc: noFree, fs: &fakeFS{size: 100 * mib, other: 95 * mib}, want: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			rotate := int64(4 * mib)
			if tt.rc.AgentBytes > 0 {
				rotate = 2 * mib
			}
			r := newTestRetainer(t, tt.rc, rotate, all, tt.open, &log)
			fs := tt.fs
			if fs == nil {
				fs = &fakeFS{size: 1 << 30}
			}
			fs.rs = []*retainer{r}
			r.statfs = fs.statfs
			for _, f := range tt.hold {
				defer r.hold(filepath.Join(r.dir, f.name()))()
			}
			for _, f := range tt.part {
				p := filepath.Join(r.dir, f.name())
				if err := os.Rename(p, p+layout.PartSuffix); err != nil {
					t.Fatal(err)
				}
			}
			r.enforce(t0.Add(90 * time.Minute))
			got := left(t, r.dir)
			for i := range got {
				got[i] = strings.TrimSuffix(got[i], layout.PartSuffix)
			}
			want := names(tt.want...)
			for _, f := range tt.part {
				if !slices.Contains(r.indexNames(), f.name()) {
					t.Errorf("unpublished %s dropped from the index", f.name())
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("left %q, want %q\nlog:\n%s", got, want, log.String())
			}
			st := retainStats(r)
			if isShort := slices.Contains(st.Short, tt.short.String()); tt.isShort != isShort {
				t.Errorf("short %q, want %v for %s", st.Short, tt.isShort, tt.short)
			}
			if tt.isShort && !strings.Contains(log.String(), "retention cannot free enough") {
				t.Errorf("nothing logged about it:\n%s", log.String())
			}
			deleted := len(all) - len(tt.want)
			var n uint64
			for i := range NumRules {
				n += r.Counters.Files[i].Load()
			}
			if n != uint64(deleted) || strings.Count(log.String(), "retention deleted file") != deleted {
				t.Errorf("counted %d deletions, logged %d, want %d", n, strings.Count(log.String(), "retention deleted file"), deleted)
			}
		})
	}
}

// indexNames lists the index as agent/name.
func (r *retainer) indexNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, a := range r.agents {
		for _, f := range a.files {
			s = append(s, a.name+"/"+f.Name)
		}
	}
	return s
}

func retainStats(r *retainer) RetainStats { return (&Store{ret: r}).RetainStats() }

// writeRotated writes 30 batches of 10 packets (timestamps 1.7e18 +
// k*1000) of agent name below dir, rotating at MinRotateSize with
// retention's index kept, and closes the store.
func writeRotated(t *testing.T, dir, name string) *testCore {
	t.Helper()
	c := newCore(t, Config{Dir: dir, RotateSize: MinRotateSize, Retain: RetainConfig{FreePercent: -1}})
	s, _, err := c.Begin(hello(name, 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 30; seq++ {
		if _, err := s.Batch(0, batchPayload(seq, int(seq-1)*10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRetentionIndexRestart: the index records every closed file with
// its bytes and first and last packet, is saved at Close, and a new
// start rebuilds the same index from it without reading the files, or
// by reading them when the saved index is missing or lists another
// size.
func TestRetentionIndexRestart(t *testing.T) {
	dir := t.TempDir()
	c := writeRotated(t, dir, "idx")
	before := sortedIndex(c.ret)
	if len(before) < 3 {
		t.Fatalf("%d files indexed, want several (rotation at %d bytes)", len(before), MinRotateSize)
	}
	// Packet k has timestamp 1.7e18 + k*1000: the files cover 0..299 in order.
	const ts0 = 1_700_000_000_000_000_000
	if before[0].First != ts0 || before[len(before)-1].Last != ts0+299*1000 {
		t.Errorf("index spans %d..%d, want %d..%d", before[0].First, before[len(before)-1].Last, int64(ts0), int64(ts0+299*1000))
	}
	for i, f := range before {
		st, err := os.Stat(filepath.Join(dir, "idx", f.Name))
		if err != nil || st.Size()+layout.IndexBytes(filepath.Join(dir, "idx", f.Name)) != f.Bytes {
			t.Errorf("%s: index says %d bytes, the file %v (%v)", f.Name, f.Bytes, st, err)
		}
		if i > 0 && f.First != before[i-1].Last+1000 {
			t.Errorf("%s starts at %d, the file before ends at %d: not contiguous", f.Name, f.First, before[i-1].Last)
		}
	}
	reload := func(name string) (scanned int) {
		t.Helper()
		var errs atomic.Uint64
		r := newRetainer(Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, dir, &errs)
		_, scanned, _ = r.loadAgent(t.Context(), "idx", time.Time{})
		if got := sortedIndex(r); !slices.Equal(got, before) {
			t.Errorf("%s: rebuilt index\n%v\nwant\n%v", name, got, before)
		}
		return scanned
	}
	if n := reload("saved index"); n != 0 {
		t.Errorf("saved index: %d files scanned, want 0", n)
	}
	idx := filepath.Join(dir, layout.RetainDir, "idx.json")
	b, _ := os.ReadFile(idx)
	var doc layout.IndexDoc
	json.Unmarshal(b, &doc)
	doc.Files[0].Bytes++ // a file that changed since
	b, _ = json.Marshal(&doc)
	os.WriteFile(idx, b, 0o600)
	if n := reload("one size differs"); n != 1 {
		t.Errorf("one size differs: %d files scanned, want 1", n)
	}
	os.Remove(idx)
	if n := reload("no saved index"); n != len(before) {
		t.Errorf("no saved index: %d files scanned, want %d", n, len(before))
	}
}

func sortedIndex(r *retainer) []layout.IndexedFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fs []layout.IndexedFile
	for _, a := range r.agents {
		fs = append(fs, a.files...)
	}
	slices.SortFunc(fs, fileOrder)
	return fs
}

// TestRetentionSharedFilesystem: two roots on one filesystem, both
// keeping 10% free, deleting at the same time: together they delete at
// most one file each beyond what the low watermark needs, each only its
// own files, oldest first, and each agent's newest file stays.
func TestRetentionSharedFilesystem(t *testing.T) {
	fs := &fakeFS{size: 100 * mib}
	var rs [2]*retainer
	var logs [2]bytes.Buffer
	for i := range rs {
		var files []tf
		for n := range 6 {
			files = append(files, tf{agent: string(rune('p' + i)), n: n, mib: 4, last: 10*n + i})
		}
		rs[i] = newTestRetainer(t, RetainConfig{}, 4*mib, files, map[string]int64{string(rune('p' + i)): 4}, &logs[i])
		rs[i].statfs = fs.statfs
	}
	fs.rs = rs[:]
	fs.other = 100*mib - 2*28*mib + 10*mib // used 110 MiB: 20 over the limit of 90, 24 over lo 86
	var done [2]chan struct{}
	for i, r := range rs {
		done[i] = make(chan struct{})
		go func() { r.enforce(t0.Add(time.Hour)); close(done[i]) }()
	}
	<-done[0]
	<-done[1]
	_, avail, _ := fs.statfs("")
	used := fs.size - avail
	if hi, lo := rs[0].watermarks(90 * mib); used > lo || used < lo-2*4*mib {
		t.Errorf("used %d MiB after both deleted, want at most lo %d and at least lo - two files (hi %d)", used/mib, lo/mib, hi/mib)
	}
	for i, r := range rs {
		got := left(t, r.dir)
		agent := string(rune('p' + i))
		newest := agent + "/" + string(rune('a'+5)) + ".pcapng"
		if !slices.Contains(got, newest) {
			t.Errorf("root %d: its newest file %s went", i, newest)
		}
		// What is left is the newest files: a suffix of a..f.
		for n := range 6 {
			name := agent + "/" + string(rune('a'+n)) + ".pcapng"
			if n < 6-len(got) == slices.Contains(got, name) {
				t.Errorf("root %d keeps %q: not the newest", i, got)
				break
			}
		}
	}
}

// TestRetentionDeleteRace: delete of a file the index lists, with what
// happens between its unlink (which finds no file: still .part) and its
// look for the .part. A file published then (its .part renamed to its
// final name) is deleted and counted; one still .part stays, in the
// index, skipped for the round; one gone altogether (deleted by
// someone else) leaves the index, uncounted.
func TestRetentionDeleteRace(t *testing.T) {
	f := tf{"a", 1, 4, 10}
	tests := []struct {
		name    string
		between func(path string) // called between the unlink and the .part check
		deleted bool              // delete reports it deleted the file
		onDisk  bool              // the file (or its .part) is left
		indexed bool              // the index still lists it
		skipped bool              // skipped for the rest of the round
	}{
		{name: "published in between", between: func(path string) {
			if err := os.Rename(path+layout.PartSuffix, path); err != nil {
				t.Error(err)
			}
		}, deleted: true},
		{name: "still unpublished", between: func(string) {}, onDisk: true, indexed: true, skipped: true},
		{name: "gone", between: func(path string) {
			if err := os.Remove(path + layout.PartSuffix); err != nil {
				t.Error(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			r := newTestRetainer(t, RetainConfig{FreePercent: -1}, 4*mib, []tf{f}, nil, &log)
			path := filepath.Join(r.dir, f.name())
			if err := os.Rename(path, path+layout.PartSuffix); err != nil {
				t.Fatal(err)
			}
			calls := 0
			r.missed = func(p string) {
				calls++
				if p != path {
					t.Errorf("hook called for %s, want %s", p, path)
				}
				tt.between(p)
			}
			a := r.agent(f.agent)
			r.mu.Lock()
			rf := a.files[0]
			r.mu.Unlock()
			skip := map[string]bool{}
			if got := r.delete(a, rf, RuleSize, skip); got != tt.deleted {
				t.Errorf("delete returned %v, want %v", got, tt.deleted)
			}
			if calls != 1 {
				t.Fatalf("the hook ran %d times, want once", calls)
			}
			onDisk := exists(path) || exists(path+layout.PartSuffix)
			if onDisk != tt.onDisk {
				t.Errorf("file on disk %v, want %v (left: %q)", onDisk, tt.onDisk, left(t, r.dir))
			}
			if indexed := slices.Contains(r.indexNames(), f.name()); indexed != tt.indexed {
				t.Errorf("indexed %v, want %v", indexed, tt.indexed)
			}
			if skipped := skip[filepath.Join(f.agent, filepath.Base(f.name()))]; skipped != tt.skipped {
				t.Errorf("skipped %v, want %v", skipped, tt.skipped)
			}
			want := uint64(0)
			if tt.deleted {
				want = 1
			}
			if n := r.Counters.Files[RuleSize].Load(); n != want || strings.Count(log.String(), "retention deleted file") != int(want) {
				t.Errorf("counted %d deletions, logged %d, want %d\nlog:\n%s", n, strings.Count(log.String(), "retention deleted file"), want, log.String())
			}
		})
	}
}

// TestRetentionAgentGone: an agent directory removed by hand leaves
// the index (its files and its saved index, with a log line) at start,
// at the next look for removed directories, and when a deletion finds
// one of its files gone; its bytes no longer count, so no other agent
// loses a file for them.
func TestRetentionAgentGone(t *testing.T) {
	a1, a2, a3 := tf{"a", 1, 4, 10}, tf{"a", 2, 4, 20}, tf{"a", 3, 4, 30}
	// Size limit 24 MiB, margin 2.4: hi 22.8, lo 21.6. With b's 12
	// MiB counted, a1 (the oldest) would go.
	rc := RetainConfig{MaxBytes: 24 * mib, FreePercent: -1}
	now := t0.Add(90 * time.Minute)
	tests := []struct {
		name string
		b    []tf // agent b's files, whose directory goes
		run  func(t *testing.T, r *retainer) *retainer
	}{
		{name: "at start", b: []tf{{"b", 1, 4, 15}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *retainer) *retainer {
				var errs atomic.Uint64
				r2 := newRetainer(Config{RotateSize: 4 * mib, Retain: rc, Logger: r.log}, r.dir, &errs)
				r2.load(t.Context())
				return r2
			}},
		{name: "looked for", b: []tf{{"b", 1, 4, 15}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *retainer) *retainer {
				r.goneAt = now.Add(-goneCheckInterval)
				r.enforce(now)
				return r
			}},
		{name: "noticed by a deletion", b: []tf{{"b", 1, 4, 5}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *retainer) *retainer {
				r.goneAt = now // not looked for in this round
				r.enforce(now)
				return r
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			r := newTestRetainer(t, rc, 4*mib, append([]tf{a1, a2, a3}, tt.b...), nil, &log)
			r.statfs = (&fakeFS{size: 1 << 30, rs: []*retainer{r}}).statfs
			r.saveIndexes(true)
			idx := filepath.Join(r.dir, layout.RetainDir, "b.json")
			if !exists(idx) {
				t.Fatalf("no saved index %s", idx)
			}
			if err := os.RemoveAll(filepath.Join(r.dir, "b")); err != nil {
				t.Fatal(err)
			}
			r = tt.run(t, r)
			for _, n := range r.indexNames() {
				if strings.HasPrefix(n, "b/") {
					t.Errorf("the index still lists %s", n)
				}
			}
			if exists(idx) {
				t.Errorf("the saved index of b is still there")
			}
			got := slices.DeleteFunc(left(t, r.dir), func(n string) bool { return strings.HasPrefix(n, layout.RetainDir) })
			if want := names(a1, a2, a3); !slices.Equal(got, want) {
				t.Errorf("left %q, want %q", got, want)
			}
			if got := r.rootBytes(); got != 0 && got != 12*mib { // 0: rebuilt from the empty files
				t.Errorf("root bytes %d, want a's only", got)
			}
			if !strings.Contains(log.String(), "agent directory gone; dropped its index") || !strings.Contains(log.String(), "agent=b") {
				t.Errorf("nothing logged about b:\n%s", log.String())
			}
			if n := r.errs.Load(); n != 0 {
				t.Errorf("%d file errors counted", n)
			}
		})
	}
}
