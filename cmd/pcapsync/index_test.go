package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// writeIndexed writes one file of 50 packets of agent web1 with a
// Store of cfg and returns it.
func writeIndexed(t *testing.T, cfg store.Config) []string {
	t.Helper()
	dir := cfg.Dir
	cfg.RotateInterval = -1 // one file, even across the top of an hour
	st, err := store.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := st.Writer("web1")
	if err != nil {
		t.Fatal(err)
	}
	h := capturetest.Hello("web1", 1)
	var ifmap []int
	for _, ifc := range h.Interfaces {
		i, err := w.AddInterface(ifc)
		if err != nil {
			t.Fatal(err)
		}
		ifmap = append(ifmap, i)
	}
	b, err := wire.ParseBatch(0, capturetest.BatchPayload(1, 0, 50), wire.BatchLimits{Unchecked: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteBatch(&b, ifmap, st.Instance(h.Instance, "web1")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	st.Close(context.Background())
	files, _ := filepath.Glob(filepath.Join(dir, "web1", "*.pcapng"))
	if len(files) != 1 {
		t.Fatalf("%d files", len(files))
	}
	return files
}

// TestIndexCommandFlows: pcapsync index rebuilds a missing or damaged
// flow file with its index, the same bytes the store wrote live,
// leaves flow files alone with --flows=false, and says an orphan flow
// file it removed is one (not an index).
func TestIndexCommandFlows(t *testing.T) {
	dir := t.TempDir()
	files := writeIndexed(t, store.Config{Dir: dir, Flows: true})
	live, err := os.ReadFile(flow.Path(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	index1 := func(args ...string) index.DirReport {
		t.Helper()
		var out, errs bytes.Buffer
		if err := run(context.Background(), append([]string{"index", dir, "--json"}, args...), &out, &errs); err != nil {
			t.Fatalf("pcapsync index: %v (%s)", err, errs.String())
		}
		var rep index.DirReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("report %q: %v", out.String(), err)
		}
		return rep
	}
	for _, plant := range []func(){
		func() { os.Remove(flow.Path(files[0])) },
		func() { os.WriteFile(flow.Path(files[0]), live[:len(live)-1], 0o640) },
	} {
		plant()
		if rep := index1(); rep.Sidecars != 1 || rep.Valid != 1 {
			t.Fatalf("report %+v, want 1 flow file built", rep)
		}
		if b, _ := os.ReadFile(flow.Path(files[0])); !bytes.Equal(b, live) {
			t.Fatal("the rebuilt flow file differs from the one the store wrote")
		}
	}
	if rep := index1(); rep.Sidecars != 0 || rep.Valid != 1 {
		t.Fatalf("second run: %+v, want nothing done", rep)
	}
	// A sound flow file beside an index rebuilt is rebuilt with it:
	// its block numbers are the old index's.
	os.Remove(index.Path(files[0]))
	if rep := index1(); rep.Sidecars != 1 || rep.Built != 1 {
		t.Fatalf("index missing: %+v, want it and the flow file built", rep)
	}
	os.Remove(flow.Path(files[0]))
	if rep := index1("--flows=false"); rep.Sidecars != 0 {
		t.Fatalf("--flows=false built flows: %+v", rep)
	}
	if _, err := os.Stat(flow.Path(files[0])); err == nil {
		t.Fatal("--flows=false wrote a flow file")
	}
	// A flow file whose data file is gone is removed, and said to be a
	// flow file, not an index.
	var e flow.Encoder
	os.WriteFile(filepath.Join(filepath.Dir(files[0]), "gone.pcapng.flows"), e.AppendEnd(e.AppendHeader(nil, "gone.pcapng"), 0), 0o640)
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"index", dir}, &out, &errs); err != nil {
		t.Fatalf("pcapsync index: %v (%s)", err, errs.String())
	}
	if !strings.Contains(out.String(), "; 0 orphan indexes and 0 temporary files removed;") ||
		!strings.Contains(out.String(), "pcapsync index: 1 orphan flow files and 0 temporary flow files removed\n") {
		t.Errorf("report %q: want the orphan flow file counted apart from the indexes", out.String())
	}
}

// TestIndexCommand: pcapsync index builds the index a file lacks (the
// one the store wrote live), repairs a damaged one, removes one whose
// file is gone, and does nothing more when run again.
func TestIndexCommand(t *testing.T) {
	dir := t.TempDir()
	files := writeIndexed(t, store.Config{Dir: dir})
	live, err := os.ReadFile(index.Path(files[0]))
	if err != nil {
		t.Fatal(err)
	}
	// The index of a file gone, which pcapsync index removes, and a
	// file named like one that it did not make, which it leaves.
	orphan := filepath.Join(dir, "web1", "gone.pcapng.idx")
	ix, err := index.Parse(live, false)
	if err != nil {
		t.Fatal(err)
	}
	ix.Name = "gone.pcapng"
	os.WriteFile(orphan, ix.Append(nil), 0o640)
	foreign := filepath.Join(dir, "web1", "other.pcapng.idx")
	os.WriteFile(foreign, live, 0o640)

	run1 := func(want index.DirReport) {
		t.Helper()
		var out, errs bytes.Buffer
		if err := run(context.Background(), []string{"index", dir, "--json"}, &out, &errs); err != nil {
			t.Fatalf("pcapsync index: %v (%s)", err, errs.String())
		}
		var got index.DirReport
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("report %q: %v", out.String(), err)
		}
		got.Bytes = 0
		if got.Files != want.Files || got.Valid != want.Valid || got.Built != want.Built || got.Rebuilt != want.Rebuilt || got.Orphans != want.Orphans || got.Foreign != want.Foreign || got.Failed != 0 {
			t.Fatalf("report %+v, want %+v", got, want)
		}
		if b, _ := os.ReadFile(index.Path(files[0])); !bytes.Equal(b, live) {
			t.Fatal("the index differs from the one the store wrote")
		}
	}
	os.Remove(index.Path(files[0]))
	run1(index.DirReport{Files: 1, Built: 1, Orphans: 1, Foreign: 1})
	os.WriteFile(index.Path(files[0]), live[:len(live)-3], 0o640)
	run1(index.DirReport{Files: 1, Rebuilt: 1, Foreign: 1})
	// An index of a version before index.WideVersion verifies, but its
	// filters may miss packets libpcap matches: it is rebuilt.
	old, err := index.Parse(live, false)
	if err != nil {
		t.Fatal(err)
	}
	old.Version = index.WideVersion - 1
	os.WriteFile(index.Path(files[0]), old.Append(nil), 0o640)
	run1(index.DirReport{Files: 1, Rebuilt: 1, Foreign: 1})
	run1(index.DirReport{Files: 1, Valid: 1, Foreign: 1})
	if _, err := os.Stat(orphan); err == nil {
		t.Fatal("the orphan index is still there")
	}
	if b, _ := os.ReadFile(foreign); !bytes.Equal(b, live) {
		t.Fatal("the foreign file was removed")
	}
}

// TestIndexCommandTimeline: the store writes each closed file's
// timeline summary (FILE.timeline) when it publishes it; pcapsync index
// writes a missing or unsound one again and removes one whose data
// file is gone.
func TestIndexCommandTimeline(t *testing.T) {
	dir := t.TempDir()
	files := writeIndexed(t, store.Config{Dir: dir})
	sum := index.BinsPath(files[0])
	if _, err := index.OpenBins(files[0]); err != nil {
		t.Fatalf("the store wrote no sound timeline summary: %v", err)
	}
	written, err := os.ReadFile(sum)
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "web1", "web1_20200101T000000.000Z.pcapng")
	os.WriteFile(index.BinsPath(orphan), written, 0o640) // names another file: foreign, left
	for _, spoil := range []func(){
		func() { os.Remove(sum) },
		func() { os.WriteFile(sum, written[:len(written)-1], 0o640) },
	} {
		spoil()
		var out, errs bytes.Buffer
		if err := run(context.Background(), []string{"index", dir, "--json"}, &out, &errs); err != nil {
			t.Fatalf("pcapsync index: %v (%s)", err, errs.String())
		}
		var rep index.DirReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(sum)
		if err != nil || !bytes.Equal(got, written) || rep.Timelines != 1 || rep.Foreign != 1 {
			t.Fatalf("summary not written again as the store wrote it (%v), report %+v", err, rep)
		}
	}
	// One whose data file is gone, which names it: removed.
	os.Remove(files[0])
	os.Remove(index.Path(files[0]))
	var out, errs bytes.Buffer
	if err := run(context.Background(), []string{"index", dir, "--json"}, &out, &errs); err != nil {
		t.Fatalf("pcapsync index: %v (%s)", err, errs.String())
	}
	if _, err := os.Lstat(sum); err == nil {
		t.Fatalf("the summary of a file gone is still there: %s", out.String())
	}
	if _, err := os.Lstat(index.BinsPath(orphan)); err != nil {
		t.Fatalf("the foreign summary was removed: %v", err)
	}
}

// TestIndexMicroseconds: a capture of microseconds (a pcapng without
// if_tsresol, as tcpdump and editcap write them) copied under the root
// with a store's name and indexed by pcapsync index answers a query of
// a time range through its index as it does read whole (--no-index).
// Its index took the raw values as nanoseconds (1970), and the query
// skipped every block: 0 packets.
func TestIndexMicroseconds(t *testing.T) {
	dir := t.TempDir()
	b := capturetest.AppendNgHead(nil, 1, nil) // Ethernet, no options: microseconds
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()
	for i := range 200 {
		b = capturetest.AppendEPB(b, uint64(t0+int64(i)*50_000), make([]byte, 60), nil) // 20 a second, 10 s in all
	}
	os.MkdirAll(filepath.Join(dir, "x1"), 0o750)
	if err := os.WriteFile(filepath.Join(dir, "x1", "x1_20260101T000000.000Z.pcapng"), b, 0o640); err != nil {
		t.Fatal(err)
	}
	var so, se bytes.Buffer
	if err := run(context.Background(), []string{"index", dir}, &so, &se); err != nil {
		t.Fatalf("pcapsync index: %v (%s)", err, se.String())
	}
	count := func(extra ...string) string {
		t.Helper()
		var so, se bytes.Buffer
		args := append([]string{"query", "--dir", dir, "-w", filepath.Join(t.TempDir(), "o.pcapng"), "--summary", "json",
			"--since", "2026-01-01T00:00:02Z", "--until", "2026-01-01T00:00:04.5Z"}, extra...)
		if err := run(context.Background(), args, &so, &se); err != nil {
			t.Fatalf("%v: %v (%s)", args, err, se.String())
		}
		var sum struct {
			Packets      int64 `json:"packets"`
			FilesIndexed int   `json:"files_indexed"`
		}
		if err := json.Unmarshal(bytes.TrimSpace(se.Bytes()), &sum); err != nil {
			t.Fatalf("summary %q: %v", se.String(), err)
		}
		if len(extra) == 0 && sum.FilesIndexed != 1 {
			t.Fatalf("the file was not read through its index: %s", se.String())
		}
		return strconv.FormatInt(sum.Packets, 10)
	}
	if got, whole := count(), count("--no-index"); got != whole || got != "50" {
		t.Fatalf("through the index %s packets, read whole %s; want 50", got, whole)
	}
}
