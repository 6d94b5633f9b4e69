package retention

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
)

const mib = 1 << 20

// fakeFS is a filesystem of size bytes whose use is what the retainers
// on it hold (their index and open files) plus other.
type fakeFS struct {
	size, other int64
	rs          []*Enforcer
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

// newTestRetainer returns a Enforcer on a new directory holding files
// (empty on disk: only the index's sizes count), each agent with an
// open file of open MiB.
func newTestRetainer(t *testing.T, rc Config, rotate int64, files []tf, open map[string]int64, logw io.Writer) *Enforcer {
	t.Helper()
	dir := t.TempDir()
	r := New(rc, Options{Dir: dir, Rotate: rotate, Logger: slog.New(slog.NewTextHandler(logw, nil))})
	for _, f := range files {
		path := filepath.Join(dir, f.name())
		os.MkdirAll(filepath.Dir(path), 0o750)
		if err := os.WriteFile(path, nil, 0o640); err != nil {
			t.Fatal(err)
		}
		a := r.agent(f.agent)
		last := t0.Add(time.Duration(f.last) * time.Minute).UnixNano()
		a.Note(Event{Kind: Closed, Name: filepath.Base(path), Bytes: f.mib * mib, Mod: 1, Times: layout.TimeRange{Min: last - int64(time.Minute), Max: last, OK: true}, Kept: true})
	}
	for name, n := range open {
		r.agent(name).Note(Event{Kind: Wrote, Bytes: n * mib, First: 1})
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
	noFree := Config{FreePercent: -1}
	tests := []struct {
		name    string
		rc      Config
		fs      *fakeFS // nil: 1 GiB, nothing else on it
		open    map[string]int64
		hold    []tf
		part    []tf // published yet: only layout.PartSuffix on disk
		want    []tf // left
		short   Rule
		isShort bool
	}{
		{name: "within every limit", rc: Config{MaxBytes: 100 * mib}, want: all},
		// Limit 32 MiB, margin 3.2: hi 30.4, lo 28.8. 24 MiB closed + 8
		// open = 32: b1 (the oldest) goes, 28 is below lo.
		{name: "size: oldest across agents", rc: Config{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "size: above the high watermark", rc: Config{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 7}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "size: below the high watermark nothing goes", rc: Config{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 6}, want: all},
		{name: "size: each agent's newest stays; short", rc: Config{MaxBytes: 16 * mib, FreePercent: -1},
			open: map[string]int64{"a": 5, "b": 4}, want: []tf{a3, b3}, short: RuleSize, isShort: true},
		{name: "size: at the limit with only the newest left is not short", rc: Config{MaxBytes: 16 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a3, b3}, short: RuleSize},
		{name: "size: held file skipped", rc: Config{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, hold: []tf{b1}, want: []tf{a2, a3, b1, b2, b3}},
		{name: "size: unpublished file skipped", rc: Config{MaxBytes: 32 * mib, FreePercent: -1},
			open: map[string]int64{"a": 4, "b": 4}, part: []tf{b1}, want: []tf{a2, a3, b1, b2, b3}},
		// Agent a: limit 20, margin 2 (a rotation file): hi 19, lo 18.
		// 12 closed + 10 open = 22: its own oldest goes, not b's older b1.
		{name: "agent: only the noisy agent's own", rc: Config{AgentBytes: 20 * mib, FreePercent: -1},
			open: map[string]int64{"a": 10}, want: []tf{a2, a3, b1, b2, b3}},
		// At t0+90m, 1h: every file whose last packet is before t0+30m.
		{name: "age: older than the cutoff", rc: Config{MaxAge: time.Hour, FreePercent: -1},
			want: []tf{a3, b3}},
		{name: "age: the newest too", rc: Config{MaxAge: 50 * time.Minute, FreePercent: -1},
			want: []tf{}},
		// 100 MiB filesystem, 10% free: limit 90, hi 88 (margin 4), lo 86.
		// 24 closed + 8 open + 57 other = 89: delete b1 (oldest) -> 85.
		{name: "free: oldest first", rc: Config{}, fs: &fakeFS{size: 100 * mib, other: 57 * mib},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "free: bytes", rc: Config{FreeBytes: 10 * mib}, fs: &fakeFS{size: 100 * mib, other: 57 * mib},
			open: map[string]int64{"a": 4, "b": 4}, want: []tf{a1, a2, a3, b2, b3}},
		{name: "free: another program fills the disk; newest kept; short", rc: Config{},
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
			fs.rs = []*Enforcer{r}
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
			st := r.Stats()
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
func (r *Enforcer) indexNames() []string {
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

// TestRetentionSharedFilesystem: two roots on one filesystem, both
// keeping 10% free, deleting at the same time: together they delete at
// most one file each beyond what the low watermark needs, each only its
// own files, oldest first, and each agent's newest file stays.
func TestRetentionSharedFilesystem(t *testing.T) {
	fs := &fakeFS{size: 100 * mib}
	var rs [2]*Enforcer
	var logs [2]bytes.Buffer
	for i := range rs {
		var files []tf
		for n := range 6 {
			files = append(files, tf{agent: string(rune('p' + i)), n: n, mib: 4, last: 10*n + i})
		}
		rs[i] = newTestRetainer(t, Config{}, 4*mib, files, map[string]int64{string(rune('p' + i)): 4}, &logs[i])
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
			r := newTestRetainer(t, Config{FreePercent: -1}, 4*mib, []tf{f}, nil, &log)
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
	rc := Config{MaxBytes: 24 * mib, FreePercent: -1}
	now := t0.Add(90 * time.Minute)
	tests := []struct {
		name string
		b    []tf // agent b's files, whose directory goes
		run  func(t *testing.T, r *Enforcer) *Enforcer
	}{
		{name: "at start", b: []tf{{"b", 1, 4, 15}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *Enforcer) *Enforcer {
				r2 := New(rc, Options{Dir: r.dir, Rotate: 4 * mib, Logger: r.log})
				r2.load(t.Context())
				return r2
			}},
		{name: "looked for", b: []tf{{"b", 1, 4, 15}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *Enforcer) *Enforcer {
				r.goneAt = now.Add(-goneCheckInterval)
				r.enforce(now)
				return r
			}},
		{name: "noticed by a deletion", b: []tf{{"b", 1, 4, 5}, {"b", 2, 4, 25}, {"b", 3, 4, 35}},
			run: func(t *testing.T, r *Enforcer) *Enforcer {
				r.goneAt = now // not looked for in this round
				r.enforce(now)
				return r
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log bytes.Buffer
			r := newTestRetainer(t, rc, 4*mib, append([]tf{a1, a2, a3}, tt.b...), nil, &log)
			r.statfs = (&fakeFS{size: 1 << 30, rs: []*Enforcer{r}}).statfs
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

func sortedIndex(r *Enforcer) []layout.IndexedFile {
	r.mu.Lock()
	defer r.mu.Unlock()
	var fs []layout.IndexedFile
	for _, a := range r.agents {
		fs = append(fs, a.files...)
	}
	slices.SortFunc(fs, fileOrder)
	return fs
}

// TestRetentionDeletesIndex: retention deletes a file's index with it.
func TestRetentionDeletesIndex(t *testing.T) {
	a1 := tf{"a", 1, 4, 10}
	r := newTestRetainer(t, Config{FreePercent: -1}, 0, []tf{a1}, nil, io.Discard)
	path := filepath.Join(r.dir, a1.name())
	if err := os.WriteFile(index.Path(path), []byte("index"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(flow.Path(path), []byte("flows"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index.BinsPath(path), []byte("timeline"), 0o640); err != nil {
		t.Fatal(err)
	}
	a := r.agent("a")
	if !r.delete(a, a.files[0], RuleSize, map[string]bool{}) {
		t.Fatal("not deleted")
	}
	if got := left(t, r.dir); len(got) != 0 {
		t.Fatalf("left after the delete: %v", got)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
