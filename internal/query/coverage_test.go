package query

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

const sec = int64(time.Second)

// retainedRoot writes agent a1 as four files of ten packets each (at 0-9
// s, 10-19 s, 20-29 s and 30-39 s after base) and b1 as one (0-39 s),
// then runs a real Store's retention over the root with an age limit
// that removes a1's two oldest files, and closes it (saving retention's
// index).
func retainedRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for f := range 4 {
		var batch []tp
		for k := range 10 {
			batch = append(batch, tp{ts: int64(10*f+k) * sec, port: 53})
		}
		writeAgent(t, dir, agentSpec{name: "a1", batches: [][]tp{batch}}, 0)
	}
	var all []tp
	for k := range 40 {
		all = append(all, tp{ts: int64(k) * sec, port: 53})
	}
	writeAgent(t, dir, agentSpec{name: "b1", batches: [][]tp{all}}, 1)
	// Packets older than base+20s go: a1's first two files.
	age := time.Since(time.Unix(0, base+20*sec))
	st, err := store.Open(store.Config{Dir: dir, Fsync: store.FsyncNever, Retain: retention.Config{FreePercent: -1, MaxAge: age}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { st.Run(ctx); close(done) }()
	testutil.Eventually(t, 10*time.Second, func() error {
		files, err := layout.AgentFiles(dir, "a1")
		if err != nil || len(files) != 2 {
			return fmt.Errorf("a1 has %d files (%v), want 2", len(files), err)
		}
		return nil
	})
	cancel()
	<-done
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := st.Close(cctx); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCoverageRetention: a query's coverage says, per agent, the oldest
// and newest packet the root keeps and, for a range reaching before
// what retention removed, that it removed packets (from when through
// when); a range before everything an agent keeps is not Covered, and
// its message names the agent's kept range.
func TestCoverageRetention(t *testing.T) {
	dir := retainedRoot(t)
	at := func(s int64) time.Time { return time.Unix(0, base+s*sec).UTC() }
	for _, c := range []struct {
		name         string
		agents       []string
		since, until int64 // seconds after base
		packets      int64
		covered      bool
		removed      bool // a1's coverage says retention removed packets in the range
	}{
		{name: "across the removal", agents: []string{"a1"}, since: 5, until: 25, packets: 5, covered: true, removed: true},
		{name: "before the oldest kept", agents: []string{"a1"}, since: 0, until: 15, covered: false, removed: true},
		{name: "another agent covers it", agents: []string{"a1", "b1"}, since: 0, until: 15, packets: 15, covered: true, removed: true},
		{name: "after the removal", agents: []string{"a1"}, since: 25, until: 35, packets: 10, covered: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Dir: dir, Agents: c.agents, Since: at(c.since), Until: at(c.until)}
			out, res, err := runQuery(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Packets != c.packets || res.Covered() != c.covered {
				t.Fatalf("%d packets, covered %v; want %d, %v", res.Packets, res.Covered(), c.packets, c.covered)
			}
			if len(res.Coverage) != len(c.agents) {
				t.Fatalf("coverage %+v, want one per agent %v", res.Coverage, c.agents)
			}
			a1 := res.Coverage[0]
			if a1.Agent != "a1" || !a1.Oldest.Equal(at(20)) || !a1.Newest.Equal(at(39)) || a1.Files != 2 || a1.TimesUnknown != 0 {
				t.Errorf("a1 coverage %+v, want 2 files kept from %v to %v", a1, at(20), at(39))
			}
			if a1.Overlaps != (c.until > 20) {
				t.Errorf("a1 overlaps %v", a1.Overlaps)
			}
			switch r := a1.Removed; {
			case !c.removed && r != nil:
				t.Errorf("a1 removed %+v, want none in the range", *r)
			case c.removed && (r == nil || r.Files != 2 || r.Bytes <= 0 || !r.From.Equal(at(0)) || !r.Through.Equal(at(19))):
				t.Errorf("a1 removed %+v, want 2 files from %v through %v", r, at(0), at(19))
			}
			// Every selected agent's line is in the section comment.
			_, ifaces, _ := readOutput(t, out)
			comment := sectionCommentOf(t, out)
			if !strings.Contains(comment, "\ncoverage: "+a1.String()) {
				t.Errorf("section comment %q lacks a1's coverage %q", comment, a1.String())
			}
			for _, ifc := range ifaces {
				agent, _, _ := strings.Cut(ifc.Name, ":")
				if !strings.HasPrefix(ifc.Comment, "covered: "+agent+" keeps ") {
					t.Errorf("interface %s comment %q", ifc.Name, ifc.Comment)
				}
			}
			msg := Uncovered(cfg, res)
			if c.covered != (msg == "") {
				t.Errorf("Uncovered %q for covered %v", msg, c.covered)
			}
			if !c.covered && (!strings.Contains(msg, "a1 keeps "+at(20).Format(time.RFC3339Nano)) || !strings.Contains(msg, "retention removed packets from")) {
				t.Errorf("message %q does not name a1's kept range and removal", msg)
			}
			b, _ := json.Marshal(res)
			if !strings.Contains(string(b), `"oldest":"`+at(20).Format(time.RFC3339Nano)+`"`) {
				t.Errorf("JSON %s lacks a1's oldest packet", b)
			}
		})
	}
}

// TestCoverageSelection: a selection that matches no agent, or
// interface patterns that match no interface with packets in the
// range, is not Covered, and the message names what there is; a filter
// that matches nothing inside covered data is an empty answer that is.
func TestCoverageSelection(t *testing.T) {
	dir, _ := threeAgents(t)
	for _, c := range []struct {
		name    string
		cfg     Config
		covered bool
		msg     string
	}{
		{name: "no such agent", cfg: Config{Agents: []string{"zz*"}}, msg: "no agent of " + "DIR" + " matches --agent zz*; agents there: a1,"},
		{name: "no such interface", cfg: Config{Ifaces: []string{"a1:eth7"}}, msg: "no interface with packets in the range matches --iface a1:eth7; interfaces there: a1:eth"},
		{name: "filter matches nothing", cfg: Config{Filter: "tcp port 9"}, covered: true},
		{name: "all", cfg: Config{}, covered: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := c.cfg
			cfg.Dir = dir
			_, res, err := runQuery(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if res.Covered() != c.covered {
				t.Fatalf("covered %v, want %v: %+v", res.Covered(), c.covered, res)
			}
			msg := Uncovered(cfg, res)
			want := strings.ReplaceAll(c.msg, "DIR", dir)
			if c.covered && msg != "" || !c.covered && !strings.Contains(msg, want) {
				t.Errorf("message %q, want %q", msg, want)
			}
		})
	}
}

// sectionCommentOf returns the comment of the section header of the
// pcapng b, as Run writes it: its first option.
func sectionCommentOf(t *testing.T, b []byte) string {
	t.Helper()
	if len(b) < 28 || binary.LittleEndian.Uint16(b[24:]) != 1 {
		return ""
	}
	l := int(binary.LittleEndian.Uint16(b[26:]))
	return string(b[28 : 28+l])
}

// TestCoverageInTools: capinfos shows the section comment (the query
// and each agent's coverage) and each interface's comment (its agent's
// covered range), and tshark reads every packet of the output.
func TestCoverageInTools(t *testing.T) {
	for _, tool := range []string{"capinfos", "tshark"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed: %v", tool, err)
		}
	}
	dir := retainedRoot(t)
	cfg := Config{Dir: dir, Since: time.Unix(0, base+5*sec), Until: time.Unix(0, base+25*sec)}
	out, res, err := runQuery(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "q.pcapng")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	info, err := exec.Command("capinfos", path).CombinedOutput()
	if err != nil {
		t.Fatalf("capinfos: %v\n%s", err, info)
	}
	t.Logf("capinfos:\n%s", info)
	for _, want := range []string{
		"Capture comment:     pcapsync query --since ",
		"coverage: " + res.Coverage[0].String(),
		"coverage: " + res.Coverage[1].String(),
		"Comment = covered: " + res.Coverage[0].String(),
		"Comment = covered: b1 keeps ",
	} {
		if !strings.Contains(string(info), want) {
			t.Errorf("capinfos shows no %q:\n%s", want, info)
		}
	}
	n, err := exec.Command("tshark", "-r", path, "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if got := strings.Count(string(n), "\n"); int64(got) != res.Packets || got == 0 {
		t.Errorf("tshark read %d packets, the query wrote %d", got, res.Packets)
	}
}

// TestCoverageUnusable: an entry named as a data file that is a link
// (never followed) and a saved retention index with invalid entries
// are named in the agent's coverage with the reason; the query still
// answers from the rest.
func TestCoverageUnusable(t *testing.T) {
	dir := retainedRoot(t)
	files, err := layout.AgentFiles(dir, "a1")
	if err != nil || len(files) == 0 {
		t.Fatal(files, err)
	}
	// The first file's name with a sequence number of its own: the
	// store numbers a file opened in the same millisecond as another
	// (_001), so its name may already have one.
	base := filepath.Base(files[0].Path)
	link := base[:strings.Index(base, "Z")] + "Z_777.pcapng"
	if err := os.Symlink(files[0].Path, filepath.Join(dir, "a1", link)); err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(dir, layout.RetainDir, "b1.json")
	b, err := os.ReadFile(idx)
	if err != nil {
		t.Fatal(err)
	}
	var doc layout.IndexDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc.Files = append(doc.Files, layout.IndexedFile{Name: "../etc/passwd", Bytes: 1, Mod: 1})
	b, _ = json.Marshal(&doc)
	if err := os.WriteFile(idx, b, 0o640); err != nil {
		t.Fatal(err)
	}
	_, res, err := runQuery(t, Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if res.Packets != 20+40 || !res.Covered() {
		t.Fatalf("%d packets, covered %v; want 60", res.Packets, res.Covered())
	}
	a1, b1 := res.Coverage[0], res.Coverage[1]
	if a1.UnusableTotal != 1 || len(a1.Unusable) != 1 || a1.Unusable[0] != (UnusableFile{Name: link, Reason: errNotRegular.Error()}) {
		t.Errorf("a1 unusable %+v (%d), want the link", a1.Unusable, a1.UnusableTotal)
	}
	if b1.UnusableTotal != 1 || b1.Unusable[0].Name != filepath.Join(layout.RetainDir, "b1.json") || !strings.Contains(b1.Unusable[0].Reason, "1 entries invalid") {
		t.Errorf("b1 unusable %+v (%d), want its saved index", b1.Unusable, b1.UnusableTotal)
	}
	if !strings.Contains(a1.String(), "; 1 files not used ("+link+": not a regular file") {
		t.Errorf("a1 in words: %q", a1.String())
	}
}

// TestCoverageWithoutRetentionIndex: without retention's index the
// kept range comes from the files' own indexes (of the first and last
// file of an agent not read), and without those it is unknown, the
// agent then taken as covering the range.
func TestCoverageWithoutRetentionIndex(t *testing.T) {
	dir := retainedRoot(t)
	if err := os.RemoveAll(filepath.Join(dir, layout.RetainDir)); err != nil {
		t.Fatal(err)
	}
	at := func(s int64) time.Time { return time.Unix(0, base+s*sec).UTC() }
	// --count 1 stops before a1's files are read.
	cfg := Config{Dir: dir, Agents: []string{"a1", "b1"}, Count: 1}
	_, res, err := runQuery(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	a1 := res.Coverage[0]
	if !a1.Oldest.Equal(at(20)) || !a1.Newest.Equal(at(39)) || a1.TimesUnknown != 0 || a1.Removed != nil {
		t.Errorf("a1 coverage from its files' indexes: %+v", a1)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "a1", "*.idx*"))
	if len(idx) != 2 {
		t.Fatalf("a1's indexes: %q", idx)
	}
	for _, p := range idx {
		os.Remove(p)
	}
	_, res, err = runQuery(t, Config{Dir: dir, Agents: []string{"a1"}, Since: at(0), Until: at(10), Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	// a1's files were read for this range (no times to skip them by):
	// their packets give the kept range.
	if a1 = res.Coverage[0]; !a1.Oldest.Equal(at(20)) || !a1.Newest.Equal(at(39)) || a1.TimesUnknown != 0 || res.Covered() {
		t.Errorf("a1 coverage from its packets: %+v, covered %v", a1, res.Covered())
	}
	// Before they were read, nothing said: the section comment, written
	// first, says so.
	out, _, err := runQuery(t, Config{Dir: dir, Agents: []string{"a1"}, Since: at(0), Until: at(10)})
	if err != nil {
		t.Fatal(err)
	}
	if c := sectionCommentOf(t, out); !strings.HasSuffix(c, "\ncoverage: a1 keeps packets at times unknown (times of 2 of 2 files unknown)") {
		t.Errorf("section comment %q", c)
	}
}
