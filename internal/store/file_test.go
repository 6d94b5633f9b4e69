package store

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
)

func TestRotationAlignedToWallClock(t *testing.T) {
	dir := t.TempDir()
	af := agentFile{dir: dir, name: "w", interval: time.Hour}
	now := time.Date(2026, 11, 22, 12, 34, 56, 0, time.UTC)
	if err := af.open(now); err != nil {
		t.Fatal(err)
	}
	defer af.close(now)
	if want := time.Date(2026, 11, 22, 13, 0, 0, 0, time.UTC); !af.rotateAt.Equal(want) {
		t.Fatalf("rotateAt %s, want %s", af.rotateAt, want)
	}
	if af.due(now.Add(25*time.Minute)) || !af.due(now.Add(26*time.Minute)) {
		t.Fatal("due before or not at the top of the hour")
	}
	if filepath.Base(af.path) != "w_20261122T123456.000Z.pcapng" {
		t.Fatalf("file name %s", filepath.Base(af.path))
	}
}

// TestPartSuffixShared: the tests' capture reader knows unfinished files
// by the store's suffix.
func TestPartSuffixShared(t *testing.T) {
	for _, n := range []string{"a.pcapng.idx", "a.pcapng.gz.idx.part", "a.pcapng", "a.pcapng.zst.part", "a.pcapng.timeline", "a.pcapng.timeline.tmp12345"} {
		if capturetest.IsIndex(n) != index.IsIndex(n) {
			t.Errorf("%s: capturetest.IsIndex %v, index.IsIndex %v", n, capturetest.IsIndex(n), index.IsIndex(n))
		}
	}
	if capturetest.PartSuffix != layout.PartSuffix {
		t.Fatalf("capturetest.PartSuffix %q, store.PartSuffix %q", capturetest.PartSuffix, layout.PartSuffix)
	}
}

// TestCreateNames: a new file takes the next name free of both a file
// and a .part of that millisecond, and the agent's directory is made
// when it is missing, also after being removed.
func TestCreateNames(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "web1")
	af := &agentFile{dir: dir, name: "web1"}
	now := time.Date(2026, 11, 24, 10, 2, 3, 4e6, time.UTC)
	base := filepath.Join(dir, "web1_20261124T100203.004Z")
	create := func(want string) {
		t.Helper()
		f, path, err := af.create(now)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if path != want {
			t.Fatalf("create: %s, want %s", path, want)
		}
		if !exists(path + layout.PartSuffix) {
			t.Fatalf("create: no %s", path+layout.PartSuffix)
		}
	}
	create(base + ".pcapng")                                                                    // the directory made
	create(base + "_001.pcapng")                                                                // the first's .part there
	if err := os.Rename(base+"_001.pcapng"+layout.PartSuffix, base+"_001.pcapng"); err != nil { // published
		t.Fatal(err)
	}
	create(base + "_002.pcapng")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	create(base + ".pcapng") // made again
}
