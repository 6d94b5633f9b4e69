//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestMaxOpenFiles: 200 agents into a collector allowed 50 open files
// (--max-open-files 50), the collector SIGKILLed and restarted while
// they send. The collector never holds more than 50 capture files open;
// no acknowledged batch is lost (every reconnect is welcomed at or above
// the highest batch acknowledged before); every packet is in the files
// exactly once; every file is complete and read to the same count by
// pcapfile, capinfos and tshark. Plain and zstd files (a parked zstd
// file must stay one frame for tshark 4.0).
func TestMaxOpenFiles(t *testing.T) {
	requireTools(t, checkTools...)
	for _, fc := range []string{"none", "zstd:1"} {
		t.Run(fc, func(t *testing.T) { testMaxOpenFiles(t, fc) })
	}
}

func testMaxOpenFiles(t *testing.T, fileCompress string) {
	const (
		agents  = 200
		budget  = 50
		batches = 120 // per agent, 2 packets each
		period  = 25 * time.Millisecond
	)
	ctx := testContext(t)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	start := func() *proc {
		return startCollector(t, ctx, "", addr, dir, "--max-open-files", strconv.Itoa(budget),
			"--file-compress", fileCompress, "--fsync", "1s")
	}
	coll := start()
	var collMu sync.Mutex
	maxOpen, maxAll := 0, 0 // the writers' descriptors; with repair's and retention's readers
	var overBudget []string // the writing descriptors of the first sample over the budget
	var overAll []string    // every capture-file descriptor of the first sample over budget+2
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() { // the collector's descriptors on capture files, sampled
		defer close(watched)
		for watchCtx.Err() == nil {
			collMu.Lock()
			pid := coll.cmd.Process.Pid
			collMu.Unlock()
			// Stopped, the collector's descriptors hold still: a listing
			// taken while it runs mixes descriptors of different moments
			// (a file closed after the listing passed its number and
			// another opened at a number after it count as two). kill
			// returns before the threads stop; a thread in a system call
			// stops only when it returns: the listing waits for all.
			syscall.Kill(pid, syscall.SIGSTOP)
			var writing, all []string
			if allStopped(pid, time.Second) {
				writing, all = openCaptureFiles(pid, dir)
			}
			syscall.Kill(pid, syscall.SIGCONT)
			if len(writing) > budget && overBudget == nil {
				overBudget = writing
			}
			if len(all) > budget+2 && overAll == nil {
				overAll = all
			}
			maxOpen, maxAll = max(maxOpen, len(writing)), max(maxAll, len(all))
			time.Sleep(20 * time.Millisecond) // a sampling period
		}
	}()

	var sent atomic.Int64
	errs := make(chan error, agents)
	var wg sync.WaitGroup
	for i := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- runBudgetAgent(ctx, addr, uint32(i), batches, period, &sent)
		}()
	}
	// Kill once about a third of the batches are sent, then restart.
	if err := testutil.Poll(60*time.Second, func() error {
		if sent.Load() < agents*batches/3 {
			return errors.New("not a third sent yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	coll.signal(syscall.SIGKILL)
	coll.wait(10 * time.Second)
	collMu.Lock()
	coll = start()
	collMu.Unlock()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	stopWatch()
	<-watched
	coll.stop(30 * time.Second)
	if t.Failed() {
		return
	}
	if maxOpen == 0 {
		t.Error("no sample saw a capture file open for writing (the collector never stopped for a listing?)")
	}
	if maxOpen > budget {
		t.Errorf("the collector held %d capture files open for writing at once; --max-open-files %d; the first sample over it:\n%s", maxOpen, budget, strings.Join(overBudget, "\n"))
	}
	// Repair and retention's index each read one file at a time,
	// outside the budget (architecture.md, Files).
	if maxAll > budget+2 {
		t.Errorf("the collector held %d capture files open at once; --max-open-files %d, plus one for repair and one for retention; the first sample over it:\n%s", maxAll, budget, strings.Join(overAll, "\n"))
	}
	t.Logf("at most %d capture files open for writing, %d in all (sampled), budget %d", maxOpen, maxAll, budget)

	r := &dirReport{Counts: map[key]int{}, Lens: map[key]int{}, IfNames: map[string]int{}}
	perFile := map[string]int{}
	for i := range agents {
		adir := filepath.Join(dir, budgetAgentName(uint32(i)))
		for _, name := range dirEntries(t, adir) {
			if strings.HasSuffix(name, ".part") {
				t.Fatalf("%s/%s left unfinished", adir, name)
			}
			path := filepath.Join(adir, name)
			perFile[path] = r.readFile(t, path)
		}
	}
	want := map[uint32]uint64{}
	for i := range agents {
		want[uint32(i)] = 2 * batches
	}
	r.expectExactlyOnce(t, "200 agents", want)
	checkFilesWithTools(t, perFile)
	t.Logf("%d files of %d agents, every packet once", len(perFile), agents)
}

// budgetAgentName is simulated agent i's name.
func budgetAgentName(i uint32) string { return fmt.Sprintf("fan%03d", i) }

// openCaptureFiles lists process pid's descriptors on capture files
// below dir open for writing (the store's writers) and all of them
// ("fd path flags").
// allStopped waits up to limit for every thread of pid to be stopped
// (state T or t in /proc/PID/task/TID/stat), and reports whether they
// were.
func allStopped(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		stopped := err == nil
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			// The state follows the command name's closing parenthesis.
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
				stopped = false
				break
			}
		}
		if stopped || time.Now().After(deadline) {
			return stopped
		}
		time.Sleep(time.Millisecond) // the pace of a polling loop
	}
}

func openCaptureFiles(pid int, dir string) (writing, all []string) {
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, nil
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		// An index is opened for a moment per block, outside the budget;
		// a file removed while open reads "PATH (deleted)".
		name := strings.TrimSuffix(filepath.Base(l), " (deleted)")
		if err != nil || !strings.HasPrefix(l, dir+"/") || !strings.Contains(name, ".pcapng") || besideFile(name) {
			continue
		}
		desc := e.Name() + " " + l
		all = append(all, desc)
		if fdWriteOnly(pid, e.Name()) {
			writing = append(writing, desc)
		}
	}
	return writing, all
}

// fdWriteOnly reports whether descriptor fd of pid was opened O_WRONLY,
// as the store's writers open their files (repair opens O_RDWR,
// retention's index O_RDONLY).
func fdWriteOnly(pid int, fd string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd))
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "flags:"); ok {
			flags, err := strconv.ParseUint(strings.TrimSpace(v), 8, 64)
			return err == nil && flags&3 == syscall.O_WRONLY
		}
	}
	return false
}

// runBudgetAgent is simulated agent i: it sends batches 1..n of two
// generated packets (stream i, seq 2(b-1) and 2(b-1)+1), one per period,
// over a connection it re-establishes after each failure, resending
// from the batch after the one the Welcome names. A Welcome below the
// highest batch acknowledged before is an error: an acknowledged batch
// was lost. It ends with a goodbye (FIN) once batch n is acknowledged.
func runBudgetAgent(ctx context.Context, addr string, i uint32, n int, period time.Duration, sent *atomic.Int64) error {
	h := wire.Hello{Name: budgetAgentName(i), Host: "e2e",
		Interfaces: []wire.Interface{{Name: "sim0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535}}}
	h.Instance[0], h.Instance[1], h.Instance[2] = 0xb0, byte(i), byte(i>>8)
	var acked atomic.Uint64
	pkt := make([]byte, 200)
	var enc wire.BatchEncoder
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil || attempt > 200 {
			return fmt.Errorf("agent %d: gave up after %d connections, %d acknowledged", i, attempt, acked.Load())
		}
		conn, last, err := budgetHandshake(ctx, addr, &h)
		if err != nil {
			time.Sleep(50 * time.Millisecond) // the collector restarts or repairs: a retry pause
			continue
		}
		if a := acked.Load(); last < a {
			conn.Close()
			return fmt.Errorf("agent %d: welcomed at batch %d, %d was acknowledged before: acknowledged batches lost", i, last, a)
		}
		acked.Store(last)
		readErr := make(chan error, 1)
		go func() { readErr <- readAcks(conn, &acked) }()
		err = nil
		for b := last + 1; b <= uint64(n) && err == nil; b++ {
			enc.Reset(nil)
			for k := range uint64(2) {
				seq := 2*(b-1) + k
				enc.Append(time.Now().UnixNano(), 0, uint32(len(pkt)), gen.Frame(pkt, gen.LinkTypeEthernet, i, seq))
			}
			if _, err = conn.Write(enc.Finish(b)); err == nil && attempt == 0 {
				sent.Add(1)
			}
			time.Sleep(period) // the agent's sending pace
		}
		if err == nil {
			err = testutil.Poll(30*time.Second, func() error {
				if acked.Load() < uint64(n) {
					return fmt.Errorf("agent %d: %d of %d acknowledged", i, acked.Load(), n)
				}
				return nil
			})
			if err == nil {
				conn.(*frameConn).Conn.(*net.TCPConn).CloseWrite() // goodbye
				<-readErr
				conn.Close()
				return nil
			}
		}
		conn.Close()
		<-readErr
	}
}

// budgetHandshake connects and says hello; it returns the Welcome's mark.
func budgetHandshake(ctx context.Context, addr string, h *wire.Hello) (net.Conn, uint64, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, 0, err
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write(wire.AppendHello(nil, h)); err != nil {
		conn.Close()
		return nil, 0, err
	}
	fr := wire.NewFrameReader(bufio.NewReader(conn), wire.Limits{})
	hd, p, err := fr.Next()
	if err == nil && hd.Type != wire.TypeWelcome {
		err = fmt.Errorf("got %s, want welcome", hd.Type)
	}
	var w wire.Welcome
	if err == nil {
		w, err = wire.ParseWelcome(p)
	}
	if err != nil {
		conn.Close()
		return nil, 0, err
	}
	conn.SetDeadline(time.Time{})
	return &frameConn{Conn: conn, fr: fr}, w.LastSeq, nil
}

// frameConn is a connection whose reads go through the FrameReader
// that read its Welcome.
type frameConn struct {
	net.Conn
	fr *wire.FrameReader
}

// readAcks raises acked with every Ack until the connection ends.
func readAcks(conn net.Conn, acked *atomic.Uint64) error {
	fr := conn.(*frameConn).fr
	for {
		h, p, err := fr.Next()
		if err != nil {
			return err
		}
		if h.Type != wire.TypeAck {
			continue
		}
		seq, err := wire.ParseAck(p)
		if err != nil {
			return err
		}
		if seq > acked.Load() {
			acked.Store(seq)
		}
	}
}

// checkFilesWithTools has capinfos count the packets of all files in
// one run, which must be the counts pcapfile read (want), and tshark
// read a sample of them to the end, without error.
func checkFilesWithTools(t *testing.T, want map[string]int) {
	t.Helper()
	files := slices.Sorted(maps.Keys(want))
	out := runTool(t, "capinfos", append([]string{"-T", "-M", "-c", "-r"}, files...)...)
	if corruptionRE.MatchString(out) {
		t.Fatalf("capinfos reports a bad file:\n%s", out)
	}
	got := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		name, n, _ := strings.Cut(line, "\t")
		got[name], _ = strconv.Atoi(strings.TrimSpace(n))
	}
	for _, f := range files {
		if got[f] != want[f] {
			t.Errorf("%s: capinfos counts %d packets, pcapfile.Reader %d", f, got[f], want[f])
		}
	}
	for k := 0; k < len(files); k += 20 {
		if n := tsharkCheck(t, files[k], map[string]int{}); n != want[files[k]] {
			t.Errorf("%s: tshark read %d packets, pcapfile.Reader %d", files[k], n, want[files[k]])
		}
	}
}
