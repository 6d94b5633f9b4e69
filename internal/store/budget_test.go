package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// openDataFiles counts this process's descriptors on capture files below
// dir (not directories being synced, nor the state file).
func openDataFiles(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(l, dir+"/") && strings.Contains(filepath.Base(l), ".pcapng") && !index.IsIndex(filepath.Base(l)) {
			n++
		}
	}
	return n
}

// frozenDataFiles counts the descriptors on capture files below dir
// while it holds every Writer's mutex, so that none opens or closes a
// file meanwhile (a listing of /proc/self/fd taken while they run mixes
// moments). It only tries the mutexes (as the budget does, so that it
// cannot deadlock with a Writer waiting for a descriptor): ok is false
// if one was busy.
func frozenDataFiles(t *testing.T, c *testCore, dir string) (n int, ok bool) {
	c.mu.Lock()
	ws := make([]*Writer, 0, len(c.writers))
	for _, w := range c.writers {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	var locked []*Writer
	defer func() {
		for _, w := range locked {
			w.mu.Unlock()
		}
	}()
	for _, w := range ws {
		if !w.mu.TryLock() {
			return 0, false
		}
		locked = append(locked, w)
	}
	return openDataFiles(t, dir), true
}

// budgetAgents writes rounds of batches for agents agent00.. in turn,
// committing each, and checks after every batch that at most max data
// files are open. It returns the sessions; batch r of every agent holds
// packets r*10 to r*10+9.
func budgetAgents(t *testing.T, c *testCore, agents, rounds, max int) []*testSession {
	t.Helper()
	ss := make([]*testSession, agents)
	for r := range rounds {
		for a := range agents {
			if ss[a] == nil {
				s, _, err := c.Begin(hello(fmt.Sprintf("agent%02d", a), byte(a+1)), func() {})
				if err != nil {
					t.Fatal(err)
				}
				ss[a] = s
			}
			if _, err := ss[a].Batch(0, batchPayload(uint64(r+1), r*10, 10)); err != nil {
				t.Fatalf("agent %d batch %d: %v", a, r+1, err)
			}
			if seq, err := ss[a].Commit(); err != nil || seq != uint64(r+1) {
				t.Fatalf("agent %d commit %d: %d, %v", a, r+1, seq, err)
			}
			if n, fds := c.OpenFiles(), openDataFiles(t, c.Dir()); n > max || fds > max {
				t.Fatalf("after agent %d batch %d: %d files counted, %d descriptors open; budget %d", a, r+1, n, fds, max)
			}
		}
	}
	return ss
}

// checkAgents checks that every agent's directory holds exactly its
// rounds*10 packets, in order, in one file that capinfos reads.
func checkAgents(t *testing.T, dir string, agents, rounds int) {
	t.Helper()
	for a := range agents {
		adir := filepath.Join(dir, fmt.Sprintf("agent%02d", a))
		pkts, files := readDir(t, adir)
		if files != 1 || len(pkts) != rounds*10 {
			t.Fatalf("agent %d: %d files, %d packets; want 1 file, %d packets", a, files, len(pkts), rounds*10)
		}
		for k, p := range pkts {
			if p.TS != int64(1_700_000_000_000_000_000+k*1000) || len(p.Data) != 60+k%40 || p.Data[0] != byte(k) {
				t.Fatalf("agent %d packet %d: ts %d, %d bytes; not packet %d", a, k, p.TS, len(p.Data), k)
			}
		}
		ents, _ := os.ReadDir(adir)
		checkTshark(t, filepath.Join(adir, ents[0].Name()))
	}
}

// TestBudget: with more agents than MaxOpenFiles, writing in turn (the
// worst order for a budget), never more than MaxOpenFiles data files are
// open; every packet lands once, in order, in one file per agent that
// stays one readable stream (one zstd frame: tshark 4.0 misreads more).
func TestBudget(t *testing.T) {
	const agents, rounds, max = 10, 6, 4
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			c := newCore(t, fm.config(Config{Dir: dir, MaxOpenFiles: max, Fsync: FsyncPerBatch}))
			ss := budgetAgents(t, c, agents, rounds, max)
			if c.Counters.BudgetParks.Load() == 0 || c.Counters.BudgetReopens.Load() == 0 {
				t.Errorf("%d parks, %d reopens; want some", c.Counters.BudgetParks.Load(), c.Counters.BudgetReopens.Load())
			}
			for _, s := range ss {
				s.End(true)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if n := c.Counters.FileErrors.Load(); n != 0 {
				t.Fatalf("%d file errors", n)
			}
			checkAgents(t, dir, agents, rounds)
		})
	}
}

// TestBudgetShutdown: Close finishes parked files as well as open ones
// (reopening them within the budget), and an interface declared while a
// file is parked gets its block when the file is reopened.
func TestBudgetShutdown(t *testing.T) {
	const agents, max = 8, 4
	for _, fm := range []fileMode{{}, {fc: compress.Spec{Codec: compress.Zstd}}, {fc: compress.Spec{Codec: compress.Zstd}, frames: ZstdFramePerBlock}} {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			c := newCore(t, fm.config(Config{Dir: dir, MaxOpenFiles: max}))
			ss := budgetAgents(t, c, agents, 2, max)
			var w *Writer
			for _, s := range ss {
				if s.w.isParked() {
					w = s.w
					break
				}
			}
			if w == nil {
				t.Fatal("no file parked")
			}
			fi, err := w.AddInterface(wire.Interface{Name: "new0", LinkType: 1, SnapLen: 65535})
			if err != nil || fi != 2 {
				t.Fatalf("AddInterface: %d, %v", fi, err)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if n := c.OpenFiles(); n != 0 {
				t.Fatalf("%d files counted open after Close", n)
			}
			checkAgents(t, dir, agents, 2)
			adir := filepath.Join(dir, w.Name())
			ents, _ := os.ReadDir(adir)
			path := filepath.Join(adir, ents[0].Name())
			if names := ifaceNames(t, path); len(names) != 3 || names[2] != w.Name()+":new0" {
				t.Fatalf("interfaces of %s: %q; want a third, %s:new0", path, names, w.Name())
			}
		})
	}
}

// ifaceNames reads a capture file to its end and returns the names of
// its interfaces.
func ifaceNames(t *testing.T, path string) []string {
	t.Helper()
	var names []string
	for _, ifc := range capturetest.EachPacket(t, path, func(*pcapfile.Reader, *pcapfile.Packet) {}) {
		names = append(names, ifc.Name)
	}
	return names
}

// TestBudgetCrash: a crash (descriptors gone, no Close) with parked and
// open files loses no committed batch: the next start repairs both.
func TestBudgetCrash(t *testing.T) {
	const agents, rounds, max = 8, 3, 4
	for _, fm := range fileModes {
		t.Run(fm.name(), func(t *testing.T) {
			dir := t.TempDir()
			c := newCore(t, fm.config(Config{Dir: dir, MaxOpenFiles: max}))
			budgetAgents(t, c, agents, rounds, max)
			parked := 0
			for _, w := range c.writers {
				if w.isParked() {
					parked++
				} else {
					w.file.f.Close() // the process is gone
				}
			}
			if parked != agents-max {
				t.Fatalf("%d parked, want %d", parked, agents-max)
			}
			c.die()
			c2 := newCore(t, fm.config(Config{Dir: dir, MaxOpenFiles: max}))
			checkAgents(t, dir, agents, rounds)
			for a := range agents {
				_, wel, err := c2.Begin(hello(fmt.Sprintf("agent%02d", a), byte(a+1)), func() {})
				if err != nil || wel.LastSeq != rounds {
					t.Fatalf("agent %d after the crash: LastSeq %d (%v), want %d", a, wel.LastSeq, err, rounds)
				}
			}
			c2.Close()
		})
	}
}

// TestBudgetStaleFirst: a file not written for staleAfter is parked
// before files in use. In a synctest bubble, so the idle time is exact.
func TestBudgetStaleFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := runCore(t, Config{MaxOpenFiles: 4})
		old := write(t, c, "old", 1)
		time.Sleep(staleAfter)
		for _, name := range []string{"b", "c", "d", "e"} {
			write(t, c, name, 1)
		}
		if !old.w.isParked() {
			t.Fatal("the stale file is not the one parked")
		}
		for _, name := range []string{"b", "c", "d", "e"} {
			if c.writers[name].isParked() {
				t.Fatalf("%s parked, a file in use", name)
			}
		}
	})
}

// TestBudgetConcurrent: agents writing at once from their own
// goroutines, more of them than the budget, neither deadlock nor exceed
// it, and every batch lands.
func TestBudgetConcurrent(t *testing.T) {
	const agents, rounds, max = 24, 20, 4
	dir := t.TempDir()
	c := newCore(t, Config{Dir: dir, MaxOpenFiles: max, FileCompress: compress.Spec{Codec: compress.Gzip}})
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	stop := make(chan struct{})
	over := make(chan int, 1)
	go func() { // watches the descriptors while the agents write
		for {
			select {
			case <-stop:
				close(over)
				return
			default:
			}
			if n, ok := frozenDataFiles(t, c, dir); ok && n > max {
				select {
				case over <- n:
				default:
				}
			}
		}
	}()
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, _, err := c.Begin(hello(fmt.Sprintf("agent%02d", a), byte(a+1)), func() {})
			for r := 0; err == nil && r < rounds; r++ {
				if _, err = s.Batch(0, batchPayload(uint64(r+1), r*10, 10)); err == nil {
					_, err = s.Commit()
				}
			}
			if err == nil {
				err = s.w.Close()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(stop)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n, ok := <-over; ok {
		t.Fatalf("%d data files open at once, budget %d", n, max)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	checkAgents(t, dir, agents, rounds)
}

func TestDefaultMaxOpenFiles(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{{0, MinMaxOpenFiles}, {DefaultFileReserve, MinMaxOpenFiles}, {1024, 384}, {20000, 9872}, {1 << 20, 524160}} {
		if got := DefaultMaxOpenFiles(tc.nofile); got != tc.want {
			t.Errorf("DefaultMaxOpenFiles(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
}
