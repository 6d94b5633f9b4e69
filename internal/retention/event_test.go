package retention

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcapsync/pcapsync/internal/layout"
)

// TestNote: what each event does to an agent's usage and index, as
// Stats shows it.
func TestNote(t *testing.T) {
	r := New(Config{FreePercent: -1}, Options{Dir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	a := r.Agent("a1")
	usage := func() int64 {
		t.Helper()
		st := r.Stats()
		if len(st.Agents) != 1 || st.Agents[0].Name != "a1" {
			t.Fatalf("agents %+v", st.Agents)
		}
		return st.Agents[0].Bytes
	}
	steps := []struct {
		name  string
		ev    Event
		admit int64
		usage int64
		files int
	}{
		{name: "admitted counts until flushed", admit: 100, usage: 100},
		{name: "written", ev: Event{Kind: Wrote, Bytes: 100, First: 5}, usage: 200},
		{name: "buffered is not usage", ev: Event{Kind: Buffered, Bytes: 30}, usage: 200},
		{name: "flushed: admitted is written now", ev: Event{Kind: Flushed}, usage: 100},
		{name: "closed, kept", ev: Event{Kind: Closed, Name: "a1_20261124T100000.000Z.pcapng", Bytes: 120, Mod: 1,
			Times: layout.TimeRange{Min: 5, Max: 9, OK: true}, Kept: true}, usage: 120, files: 1},
		{name: "more written", ev: Event{Kind: Wrote, Bytes: 50}, usage: 170, files: 1},
		{name: "closed, removed", ev: Event{Kind: Closed, Name: "a1_20261124T110000.000Z.pcapng", Bytes: 50}, usage: 120, files: 1},
	}
	for _, s := range steps {
		if s.admit > 0 {
			a.Admit(s.admit)
		} else {
			a.Note(s.ev)
		}
		if u := usage(); u != s.usage {
			t.Fatalf("%s: usage %d, want %d", s.name, u, s.usage)
		}
		if n := len(r.Files("a1")); n != s.files {
			t.Fatalf("%s: %d files indexed, want %d", s.name, n, s.files)
		}
	}
	if st := r.Stats(); st.Agents[0].Oldest.UnixNano() != 5 {
		t.Errorf("oldest packet %v, want 5 ns", st.Agents[0].Oldest)
	}
	if n := testing.AllocsPerRun(100, func() {
		a.Note(Event{Kind: Wrote, Bytes: 1})
		a.Note(Event{Kind: Buffered, Bytes: 1})
		a.Note(Event{Kind: Flushed})
	}); n != 0 {
		t.Errorf("the write path's events allocate %v times", n)
	}
}

// TestNoteShared: in Shared mode an agent's index is written by the
// Store holding it only: after Taken, and once more at Released.
func TestNoteShared(t *testing.T) {
	dir := t.TempDir()
	r := New(Config{FreePercent: -1}, Options{Dir: dir, Shared: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	name := "a1_20261124T100000.000Z.pcapng"
	os.MkdirAll(filepath.Join(dir, "a1"), 0o750)
	os.WriteFile(filepath.Join(dir, "a1", name), []byte("x"), 0o640)
	a := r.Agent("a1")
	closed := Event{Kind: Closed, Name: name, Bytes: 1, Mod: 1, Times: layout.TimeRange{Min: 1, Max: 2, OK: true}, Kept: true}
	a.Note(closed)
	r.Save()
	if _, err := layout.ReadIndex(dir, "a1"); err == nil {
		t.Fatal("an agent not taken had its index saved")
	}
	a.Note(Event{Kind: Taken})
	a.Note(Event{Kind: Released})
	if m, err := layout.ReadIndex(dir, "a1"); err != nil || len(m) != 1 {
		t.Fatalf("index saved at Released: %v, %v", m, err)
	}
}
