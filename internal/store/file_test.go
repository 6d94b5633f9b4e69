package store

import (
	"path/filepath"
	"testing"
	"time"

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
	if capturetest.PartSuffix != PartSuffix {
		t.Fatalf("capturetest.PartSuffix %q, store.PartSuffix %q", capturetest.PartSuffix, PartSuffix)
	}
}
