package layout

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestAgentFiles: data files in write order (a .part with its name, a
// same-millisecond _001 after its twin), other names ignored, times
// only for files the index lists with their size.
func TestAgentFiles(t *testing.T) {
	dir := t.TempDir()
	ad := filepath.Join(dir, "a1")
	os.MkdirAll(ad, 0o750)
	files := map[string]int{
		"a1_20261124T100000.000Z.pcapng":          10,
		"a1_20261124T100000.000Z_001.pcapng.gz":   11,
		"a1_20261124T090000.000Z.pcapng.zst":      12,
		"a1_20261124T110000.000Z.pcapng.zst.part": 13,
		"notes.txt":                                  1,
		"a1_20261124T100000.000Z.pcapng.tmp":         1,
		".a1_20261124T120000.000Z.pcapng":            1,
		"a1_20261124T080000.000Z.pcapng.part.repair": 1,
	}
	for n, size := range files {
		if err := os.WriteFile(filepath.Join(ad, n), make([]byte, size), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	mod := func(name string) int64 {
		st, err := os.Stat(filepath.Join(ad, name))
		if err != nil {
			t.Fatal(err)
		}
		return st.ModTime().UnixNano()
	}
	b, _ := json.Marshal(IndexDoc{Version: 1, Files: []IndexedFile{
		{Name: "a1_20261124T090000.000Z.pcapng.zst", Bytes: 12, Mod: mod("a1_20261124T090000.000Z.pcapng.zst"), First: 5, Last: 9},
		{Name: "a1_20261124T100000.000Z.pcapng", Bytes: 99, Mod: mod("a1_20261124T100000.000Z.pcapng"), First: 1, Last: 2}, // another size: not trusted
		// The right size, another modification time: not trusted either.
		{Name: "a1_20261124T100000.000Z_001.pcapng.gz", Bytes: 11, Mod: mod("a1_20261124T100000.000Z_001.pcapng.gz") - 1, First: 1, Last: 2},
	}})
	os.MkdirAll(filepath.Join(dir, RetainDir), 0o750)
	os.WriteFile(filepath.Join(dir, RetainDir, "a1.json"), b, 0o640)
	got, err := AgentFiles(dir, "a1")
	if err != nil {
		t.Fatal(err)
	}
	want := []FileInfo{
		{Path: filepath.Join(ad, "a1_20261124T090000.000Z.pcapng.zst"), Size: 12, Times: true, First: 5, Last: 9},
		{Path: filepath.Join(ad, "a1_20261124T100000.000Z.pcapng"), Size: 10},
		{Path: filepath.Join(ad, "a1_20261124T100000.000Z_001.pcapng.gz"), Size: 11},
		{Path: filepath.Join(ad, "a1_20261124T110000.000Z.pcapng.zst.part"), Size: 13, Part: true},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("file %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if _, err := AgentFiles(dir, "nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing agent: %v", err)
	}
}

// TestAgents: the agent directories, sorted; not a link to a directory,
// not a file, not the writer's own or an invalid name.
func TestAgents(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"b2", "a1", RetainDir, ".hidden", "bad name"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o750); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "c3"), nil, 0o640)
	if err := os.Symlink(filepath.Join(dir, "a1"), filepath.Join(dir, "d4")); err != nil {
		t.Fatal(err)
	}
	got, err := Agents(dir)
	if want := []string{"a1", "b2"}; err != nil || !slices.Equal(got, want) {
		t.Fatalf("Agents = %q, %v; want %q", got, err, want)
	}
	if _, err := Agents(filepath.Join(dir, "none")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing root: %v", err)
	}
}
