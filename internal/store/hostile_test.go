package store

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
	"github.com/pcapsync/pcapsync/internal/testutil"
)

// runStore opens a Store on cfg (logging to the returned buffer) and
// runs it; stop cancels Run and fails t unless it returns within 5 s
// (as a collector's SIGTERM does), then closes the Store.
func runStore(t *testing.T, cfg Config) (c *testCore, log *testutil.Buffer, stop func()) {
	t.Helper()
	log = &testutil.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	c = newCore(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { c.Run(ctx); close(ran) }()
	stopped := false
	stop = func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatalf("Run did not return within 5s of its cancel (a collector's SIGTERM)")
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	t.Cleanup(stop)
	return c, log, stop
}

// writeFiles writes n batches of agent through c, rotated at
// MinRotateSize, and ends the session: several closed files whose
// packets (2023) are older than any MaxAge of an hour.
func writeFiles(t *testing.T, c *testCore, agent string, id byte, n int) {
	t.Helper()
	s, _, err := c.Begin(hello(agent, id), func() {})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		if _, err := s.Batch(0, batchPayload(seq, int(seq-1)*10, 10)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s.End(true)
}

// plant writes a file of a few bytes at path, modified in 2020.
func plant(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("not ours"), 0o640); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionLeavesForeignFiles: retention deletes only the data
// files the Store names, in directories that are not links: a capture
// copied into an agent's directory, a directory that looks like an
// agent's, a link in place of an agent's directory or of a data file,
// and what lies behind them survive, each reported once.
func TestRetentionLeavesForeignFiles(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	foreign := []string{
		"a1/mycapture.pcapng",
		"a1/notes/a1_20200101T000000.000Z.pcapng",
		"a1/a1_20200101T000000.000Z.pcapng.orig",
		"exports/incident.pcapng",
		"exports/exports_2020-01-01.pcapng",
	}
	for _, f := range foreign {
		plant(t, filepath.Join(dir, f))
	}
	victims := []string{
		filepath.Join(outside, "evil_20200101T000000.000Z.pcapng"),
		filepath.Join(outside, "victim.pcapng"),
	}
	for _, v := range victims {
		plant(t, v)
	}
	links := []string{"evil", "a1/a1_20200102T000000.000Z.pcapng"}
	if err := os.Symlink(outside, filepath.Join(dir, links[0])); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victims[1], filepath.Join(dir, links[1])); err != nil {
		t.Fatal(err)
	}
	c, log, stop := runStore(t, Config{Dir: dir, RotateSize: MinRotateSize, Fsync: FsyncNever,
		Retain: RetainConfig{MaxAge: time.Hour, FreePercent: -1}})
	writeFiles(t, c, "a1", 1, 30)
	// The age rule deletes the Store's own files of a1 (packets of 2023).
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := c.Retention().Files[retention.RuleAge].Load(); n < 3 {
			return errors.New("retention deleted fewer than 3 files")
		}
		return nil
	})
	stop()
	c.ret.Load(t.Context()) // another pass: nothing reported twice
	for _, p := range append(append(foreign, links...), victims...) {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s: %v; retention must leave it alone", p, err)
		}
	}
	for _, p := range []string{"a1/mycapture.pcapng", "a1/notes", "exports/incident.pcapng", "evil", links[1]} {
		if n := strings.Count(log.String(), filepath.Join(dir, p)+"\n"); n != 1 {
			t.Errorf("%s reported %d times, want once\n%s", p, n, log.String())
		}
	}
}

// TestLinkedAgentDir: a Writer of an agent whose directory is a link is
// refused (ErrAgentDir, counted); one made a link after the Writer was
// made writes nothing through it either; the files outside are not
// listed (AgentFiles) nor deleted.
func TestLinkedAgentDir(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "evil_20200101T000000.000Z.pcapng")
	plant(t, victim)
	if err := os.Symlink(outside, filepath.Join(dir, "evil")); err != nil {
		t.Fatal(err)
	}
	c, _, _ := runStore(t, Config{Dir: dir, Retain: RetainConfig{MaxAge: time.Hour, FreePercent: -1}})
	if _, err := c.Writer("evil"); !errors.Is(err, ErrAgentDir) {
		t.Fatalf("Writer(evil) = %v, want ErrAgentDir", err)
	}
	if c.Counters.AgentDirRefused.Load() != 1 {
		t.Errorf("AgentDirRefused = %d, want 1", c.Counters.AgentDirRefused.Load())
	}
	if _, err := layout.AgentFiles(dir, "evil"); !errors.Is(err, ErrAgentDir) {
		t.Errorf("AgentFiles(evil) = %v, want ErrAgentDir", err)
	}
	// Swapped for a link between the Writer and its first file.
	s, _, err := c.Begin(hello("late", 2), func() {})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "late")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Batch(0, batchPayload(1, 0, 10)); !errors.Is(err, ErrAgentDir) {
		t.Fatalf("a batch of an agent whose directory became a link: %v, want ErrAgentDir", err)
	}
	if seq, _ := s.Commit(); seq != 0 {
		t.Fatalf("acknowledged %d batches written nowhere", seq)
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("outside the root: %d files, want the victim alone", len(ents))
	}
}

// TestRetentionCacheFIFO: a FIFO (or a link) planted as an agent's
// saved index does not block retention, which still deletes, nor the
// Store's shutdown; a FIFO as the state file does not block Open.
func TestRetentionCacheFIFO(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, layout.RetainDir), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(layout.RetainDir, "a1.json"), StateFile} {
		if err := unix.Mkfifo(filepath.Join(dir, p), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, layout.RetainDir, "a2.json")); err != nil {
		t.Fatal(err)
	}
	opened := make(chan struct{})
	var c *testCore
	var stop func()
	go func() {
		defer close(opened)
		c, _, stop = runStore(t, Config{Dir: dir, RotateSize: MinRotateSize, Fsync: FsyncNever,
			Retain: RetainConfig{MaxAge: time.Hour, FreePercent: -1}})
	}()
	select {
	case <-opened:
	case <-time.After(5 * time.Second):
		t.Fatal("Open blocked on a FIFO as the state file")
	}
	if c == nil {
		t.FailNow()
	}
	writeFiles(t, c, "a1", 1, 30)
	writeFiles(t, c, "a2", 2, 30)
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := c.Retention().Files[retention.RuleAge].Load(); n < 6 {
			return errors.New("retention deleted fewer than 6 files")
		}
		return nil
	})
	stop()
}

// TestStateFileForged: a state file with an instance id longer than 16
// bytes (which hex.Decode would write past the id's end) is damaged:
// Open moves it aside and starts, it does not panic.
func TestStateFileForged(t *testing.T) {
	dir := t.TempDir()
	doc := `{"version":1,"instances":[{"instance":"` + strings.Repeat("ab", 17) + `","name":"a1","last_seq":5}]}`
	if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(doc), 0o640); err != nil {
		t.Fatal(err)
	}
	c := newCore(t, Config{Dir: dir})
	defer c.Close()
	if _, err := os.Stat(filepath.Join(dir, StateFile+".damaged")); err != nil {
		t.Fatalf("forged state file not moved aside: %v", err)
	}
}

// TestForeignDirNotAnAgent: a directory below the root holding no file
// the Store made (exports/) is not taken for an agent by retention.
func TestForeignDirNotAnAgent(t *testing.T) {
	dir := t.TempDir()
	plant(t, filepath.Join(dir, "exports", "incident.pcapng"))
	c, _, stop := runStore(t, Config{Dir: dir, Retain: RetainConfig{MaxAge: time.Hour, FreePercent: -1}})
	testutil.Eventually(t, 5*time.Second, func() error {
		if !c.ret.Loaded() {
			return errors.New("retention index not loaded yet")
		}
		return nil
	})
	stop()
	for _, a := range c.RetainStats().Agents {
		if a.Name == "exports" {
			t.Fatalf("exports/ taken for an agent: %+v", a)
		}
	}
}
