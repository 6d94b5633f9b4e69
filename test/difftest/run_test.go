//go:build linux

package difftest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen/capgen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// start is the first timestamp of every capture of a run: the captures
// tie across agents.
const start = 1_764_000_000_000_000_000

// collectorFlags: small index blocks and files, so that a capture's
// packets lie in several files of several blocks each and the index
// has blocks to leave out; no retention (it would delete on a full
// disk).
var collectorFlags = []string{"--index-block", "8K", "--rotate-size", "512K", "--retain-free", "0"}

// agentBatch: small batches, so that the collector writes a capture in
// many batches (rotation and index blocks fall between batches).
const agentBatch = "8K"

func randomSeed() uint64 {
	for {
		if s := rand.Uint64() % 1_000_000; s > 1 {
			return s
		}
	}
}

// trial is one seed's comparison.
type trial struct {
	t        *testing.T
	seed     uint64
	work     string // captures under in/, the output root under out/
	captures []*capgen.Capture
	classes  []string
	modes    []mode
	began    time.Time

	mu      sync.Mutex
	queries int
	filters map[string]bool
	diffs   []*diff
	windows int // queries stopped by the documented reorder-window error
}

func newRun(t *testing.T, seed uint64) *trial {
	r := &trial{t: t, seed: seed, classes: list(*flagClasses), filters: map[string]bool{}, began: time.Now()}
	r.work = t.TempDir()
	if *flagKeep != "" {
		r.work = filepath.Join(*flagKeep, fmt.Sprintf("seed-%d", seed))
		if err := os.MkdirAll(r.work, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range allModes {
		if names := list(*flagModes); names == nil || slices.Contains(names, m.name) {
			r.modes = append(r.modes, m)
		}
	}
	return r
}

// prepare generates the captures and has the real agent replay each,
// as its own agent, into a real collector.
func (r *trial) prepare() {
	t := r.t
	links := capgen.Links
	if names := list(*flagLinks); names != nil {
		links = nil
		for _, n := range names {
			l, err := capgen.LinkByName(n)
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, l)
		}
	}
	n := *flagCaptures
	if n == 0 {
		n = len(links)
	}
	in := filepath.Join(r.work, "in")
	if err := os.MkdirAll(in, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		// Every other capture three times as long: more than the smallest
		// reorder window holds.
		packets := *flagPackets * (1 + 2*(i%2))
		c := capgen.Generate(capgen.Config{Seed: r.seed, Index: i, Link: links[i%len(links)], Packets: packets, Start: start})
		if err := c.WriteFile(r.source(c)); err != nil {
			t.Fatal(err)
		}
		r.captures = append(r.captures, c)
	}
	r.collect()
}

func (r *trial) source(c *capgen.Capture) string { return filepath.Join(r.work, "in", c.Name+".pcap") }
func (r *trial) root() string                    { return filepath.Join(r.work, "out") }

// collect runs a collector and the agents (jobs at a time), and stops
// the collector once every agent's packets are acknowledged, so that
// every file is closed, with its index.
func (r *trial) collect() {
	t := r.t
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	addr := "127.0.0.1:" + strconv.Itoa(freeport.Port(t))
	var cerr testutil.Buffer
	coll := exec.CommandContext(ctx, pcapsyncBin, append([]string{"collector", "--insecure", "--listen", addr, "--dir", r.root()}, collectorFlags...)...)
	coll.Stderr = &cerr
	if err := coll.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- coll.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			coll.Process.Kill()
			<-done
		}
	}()
	testutil.Eventually(t, 20*time.Second, func() error {
		if bytes.Contains([]byte(cerr.String()), []byte("collector listening")) {
			return nil
		}
		return fmt.Errorf("the collector has not logged that it listens: %s", cerr.String())
	})
	sem := make(chan struct{}, max(1, *flagJobs))
	var wg sync.WaitGroup
	errs := make([]error, len(r.captures))
	for i, c := range r.captures {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out, err := exec.CommandContext(ctx, pcapsyncBin, "agent", "--collector", addr, "--insecure", "--name", c.Name, "--batch-size", agentBatch, "-r", r.source(c)).CombinedOutput()
			if err != nil {
				errs[i] = fmt.Errorf("agent %s: %w\n%s", c.Name, err, out)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	coll.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		stopped = true
		if err != nil {
			t.Fatalf("collector: %v\n%s", err, cerr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the collector did not stop within 30s of SIGTERM")
	}
}
