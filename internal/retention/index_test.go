package retention

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// writeDataFiles writes n pcapng data files of agent below dir, file i
// holding packets at Unix ns 1000*(10i) .. 1000*(10i+9), and returns
// their index entries as a scan finds them, oldest first.
func writeDataFiles(t *testing.T, dir, agent string, n int) []layout.IndexedFile {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, agent), 0o750); err != nil {
		t.Fatal(err)
	}
	var want []layout.IndexedFile
	for i := range n {
		name := agent + "_" + time.Unix(int64(i), 0).UTC().Format(layout.FileTimeLayout) + "Z.pcapng"
		path := filepath.Join(dir, agent, name)
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w, err := pcapfile.NewNgWriter(f, pcapfile.SectionInfo{})
		if err != nil {
			t.Fatal(err)
		}
		ifc, err := w.AddInterface(pcapfile.Interface{Name: "eth0", LinkType: 1})
		if err != nil {
			t.Fatal(err)
		}
		for k := range 10 {
			if err := w.WritePacket(ifc, int64(1000*(10*i+k)), 60, make([]byte, 60)); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, layout.IndexedFile{Name: name, Bytes: st.Size(), Mod: st.ModTime().UnixNano(),
			First: int64(1000 * 10 * i), Last: int64(1000 * (10*i + 9))})
	}
	return want
}

// TestIndexRestart: a start rebuilds the index from the saved one
// without reading the files, and reads a file the saved index lists
// with another size, or all of them when there is no saved index.
func TestIndexRestart(t *testing.T) {
	dir := t.TempDir()
	want := writeDataFiles(t, dir, "idx", 4)
	load := func(name string) (scanned int) {
		t.Helper()
		r := New(Config{FreePercent: -1}, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		_, scanned, _ = r.loadAgent(t.Context(), "idx", time.Time{})
		if got := r.Files("idx"); !slices.Equal(got, want) {
			t.Errorf("%s: rebuilt index\n%v\nwant\n%v", name, got, want)
		}
		r.Save()
		return scanned
	}
	if n := load("no saved index"); n != len(want) {
		t.Errorf("no saved index: %d files scanned, want %d", n, len(want))
	}
	if n := load("saved index"); n != 0 {
		t.Errorf("saved index: %d files scanned, want 0", n)
	}
	idx := filepath.Join(dir, layout.RetainDir, "idx.json")
	b, _ := os.ReadFile(idx)
	var doc layout.IndexDoc
	json.Unmarshal(b, &doc)
	doc.Files[0].Bytes++ // a file that changed since
	b, _ = json.Marshal(&doc)
	os.WriteFile(idx, b, 0o600)
	if n := load("one size differs"); n != 1 {
		t.Errorf("one size differs: %d files scanned, want 1", n)
	}
	os.Remove(idx)
	if n := load("no saved index again"); n != len(want) {
		t.Errorf("no saved index: %d files scanned, want %d", n, len(want))
	}
}

// TestRemovedRecord: the files retention deletes are recorded in the
// agent's saved index (how many, their bytes, the oldest and newest
// packet among them), and the record survives a restart and grows
// from there.
func TestRemovedRecord(t *testing.T) {
	dir := t.TempDir()
	files := writeDataFiles(t, dir, "rm", 4) // last packets at 9, 19, 29, 39 µs
	cfg := Config{FreePercent: -1, MaxAge: time.Second}
	round := func(cutoff int64) layout.Index {
		t.Helper()
		r := New(cfg, Options{Dir: dir, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		r.Load(t.Context())
		r.enforce(time.Unix(0, cutoff).Add(cfg.MaxAge))
		r.Save()
		ix, err := layout.ReadIndexDoc(dir, "rm")
		if err != nil {
			t.Fatal(err)
		}
		return ix
	}
	for _, c := range []struct {
		cutoff int64
		want   layout.Removed
	}{
		{cutoff: 1, want: layout.Removed{}}, // older than 1 ns: none
		{cutoff: 20000, want: layout.Removed{Files: 2, Bytes: files[0].Bytes + files[1].Bytes, From: files[0].First, Through: files[1].Last}},
		// A restart: the record is loaded and grows.
		{cutoff: 30000, want: layout.Removed{Files: 3, Bytes: files[0].Bytes + files[1].Bytes + files[2].Bytes, From: files[0].First, Through: files[2].Last}},
	} {
		ix := round(c.cutoff)
		if ix.Removed != c.want {
			t.Errorf("cutoff %d: removed %+v, want %+v", c.cutoff, ix.Removed, c.want)
		}
		if len(ix.Files) != 4-int(c.want.Files) {
			t.Errorf("cutoff %d: %d files indexed, want %d", c.cutoff, len(ix.Files), 4-c.want.Files)
		}
	}
}
