//go:build linux

package e2e

// Fault tests: the collector killed with SIGKILL again and again under a
// steady stream, and twice in a row before its agent is back; a full
// disk; hundreds of broken connections. Each
// checks the delivery contract of docs/reliability.md from outside: every
// packet in the files exactly once, every file readable by tshark and
// capinfos, nothing left behind.

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// pacedInput is a FIFO that an agent replays (--read) while the test
// feeds it a capture file at a steady pace. An unpaced replay of a file
// small enough for tshark to check in seconds is over in well under a
// second on loopback; through the FIFO the agent reads, and so streams,
// at the pace set here, on its ordinary file-replay path.
type pacedInput struct {
	path    string
	fed     atomic.Bool   // set once all but the held-back tail is written
	written atomic.Int64  // bytes written so far
	release chan struct{} // closed by the test: write the tail, then EOF
	done    chan struct{} // closed when the feeder returned
	err     error         // the feeder's error; read after done
}

// heldBack is how much of the input the feeder keeps until released, so
// that the agent cannot reach the end of its input (and exit) before
// the test is done injecting faults.
const heldBack = 4 << 10

// startPacedInput makes a FIFO at path and feeds it src in a goroutine:
// all but the last heldBack bytes evenly over d, the rest once released.
// The feeder stops when the test ends.
func startPacedInput(t *testing.T, ctx context.Context, src, path string, d time.Duration) *pacedInput {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) <= 2*heldBack {
		t.Fatalf("%s: %d bytes is too small to pace", src, len(data))
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		t.Fatalf("mkfifo %s: %v", path, err)
	}
	in := &pacedInput{path: path, release: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		<-in.done
	})
	go func() {
		defer close(in.done)
		in.err = in.feed(ctx, data, d)
	}()
	return in
}

// finish releases the held-back tail and waits for the feeder.
func (in *pacedInput) finish(t *testing.T) {
	t.Helper()
	in.releaseTail()
	select {
	case <-in.done:
	case <-time.After(15 * time.Second):
		t.Fatalf("feeding %s did not end within 15s of the release", in.path)
	}
	if in.err != nil {
		t.Fatalf("feeding %s: %v", in.path, in.err)
	}
}

// releaseTail lets the feeder write the held-back tail (and end the
// input) without waiting for it; finish waits.
func (in *pacedInput) releaseTail() {
	select {
	case <-in.release:
	default:
		close(in.release)
	}
}

// feedChunk is the most one write to the FIFO carries: each write has
// its own deadline, and written moves as the agent reads.
const feedChunk = 256 << 10

func (in *pacedInput) feed(ctx context.Context, data []byte, d time.Duration) error {
	// A non-blocking open for writing fails with ENXIO until a reader (the
	// agent, blocked in its open) is there.
	var f *os.File
	for {
		var err error
		f, err = os.OpenFile(in.path, os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENXIO) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	defer f.Close()
	write := func(b []byte) error {
		for len(b) > 0 {
			n := min(len(b), feedChunk)
			f.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := f.Write(b[:n]); err != nil {
				return err
			}
			in.written.Add(int64(n))
			b = b[n:]
		}
		return nil
	}
	paced := int64(len(data) - heldBack)
	start := time.Now()
	for off := int64(0); off < paced; {
		end := paced
		if el := time.Since(start); el < d {
			end = paced * int64(el) / int64(d)
		}
		if end > off {
			if err := write(data[off:end]); err != nil {
				return fmt.Errorf("at byte %d: %w", off, err)
			}
			off = end
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	in.fed.Store(true)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-in.release:
	}
	if err := write(data[paced:]); err != nil {
		return fmt.Errorf("writing the tail: %w", err)
	}
	return f.Close()
}

// tally counts, against sequence numbers 0..want[s]-1 of each stream s,
// the packets missing, the packets present more than once (extra copies
// are counted, not packets) and the unexpected generated packets.
func (r *dirReport) tally(want map[uint32]uint64) (lost, dup, unexpected int) {
	for stream, n := range want {
		for seq := range n {
			switch c := r.Counts[key{stream, seq}]; {
			case c == 0:
				lost++
			case c > 1:
				dup += c - 1
			}
		}
	}
	for k, c := range r.Counts {
		if n, ok := want[k.stream]; !ok || k.seq >= n {
			unexpected += c
		}
	}
	return lost, dup, unexpected
}

// TestCollectorKill9 kills the collector with SIGKILL at random moments
// (150-600ms after it listens), at least 20 times, under a steady replay,
// restarting it each time on the same port and directory. After the last
// restart the agent must finish with every packet acknowledged, and the
// files must hold every packet exactly once, all of them finished
// (repaired on restart) and readable by tshark and capinfos.
func TestCollectorKill9(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		count    = 300_000 // 64-byte frames: 24 MB of input; tshark checks it in ~6s
		stream   = 41
		name     = "kill9"
		minKills = 20
		feedTime = 12 * time.Second // a stream long enough for more than minKills kills
	)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "in64.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.Mix64, Stream: stream, Seed: 41})
	in := startPacedInput(t, ctx, src, filepath.Join(tmp, "in.fifo"), feedTime)

	dir := t.TempDir()
	agentDir := filepath.Join(dir, name)
	addr := freeport.Addr(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, seed))
	t.Logf("kill delays drawn from seed %d", seed)

	coll := startCollector(t, ctx, "", addr, dir)
	colls := []*proc{coll}
	// 64 KiB batches (about 800 packets) so that batches, acks and marks
	// keep coming at the replay's pace, as they do for live capture.
	agent := startReplay(t, ctx, addr, name, in.path, "--batch-size", "64K")
	start := time.Now()
	deadline := start.Add(feedTime + 30*time.Second)
	kills := 0
	for kills < minKills || !in.fed.Load() {
		if agent.exited() {
			t.Fatalf("agent exited after %d kills before its input ended: %v", kills, agent.cmd.ProcessState)
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d kills in %v", kills, time.Since(start))
		}
		time.Sleep(150*time.Millisecond + time.Duration(rng.Int64N(int64(450*time.Millisecond)))) // the seeded moment of the kill
		coll.signal(syscall.SIGKILL)
		if code := coll.wait(10 * time.Second); code != -1 {
			t.Fatalf("collector exited with code %d before it was killed", code)
		}
		kills++
		coll = startCollector(t, ctx, "", addr, dir)
		colls = append(colls, coll)
	}
	killTime := time.Since(start)
	in.finish(t)
	s := finishReplay(t, agent, count, 30*time.Second)
	coll.stop(20 * time.Second)
	last := coll.collectorSummary()
	t.Logf("agent: %+v", s)
	t.Logf("last collector: %+v", last)

	if got := agentDirs(t, dir); !slices.Equal(got, []string{name}) {
		t.Errorf("collector dir holds %q, want only [%s]", got, name)
	}
	r := checkAgentDir(t, agentDir)
	want := map[uint32]uint64{stream: count}
	r.expectExactlyOnce(t, name, want)
	lost, dup, unexpected := r.tally(want)
	if s.Reconnects == 0 {
		t.Errorf("agent counted no reconnects for %d collector kills", kills)
	}
	repaired, cut, removed := repairCounts(colls)
	t.Logf("RELIABILITY: collector SIGKILL under a paced replay (%d x 64-byte packets over %v, 64 KiB batches): "+
		"kills survived %d, packets sent %d, lost %d, duplicated %d, unexpected %d, files %d, agent reconnects %d; "+
		"unfinished files repaired %d (%d cut back), removed %d",
		count, killTime.Round(100*time.Millisecond), kills, s.Sent, lost, dup, unexpected, len(r.Files), s.Reconnects,
		repaired, cut, removed)
}

// TestCollectorKilledTwice: the collector writes batches and is killed
// before their acknowledgement reaches the agent; the next run repairs
// the file and is killed too, before the agent reconnects (a crash loop,
// or an agent cut off for a while); the third run must still know those
// batches: the agent resends them, and they must be dropped as
// duplicates, not written twice. The agent is a raw client that ignores
// acknowledgements, which is what a lost acknowledgement looks like to
// the collector; the test is deterministic where TestCollectorKill9
// meets this case only by chance.
func TestCollectorKilledTwice(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		name    = "twice"
		stream  = 47
		batches = 5
		perBat  = 10
	)
	dir := t.TempDir()
	addr := freeport.Addr(t)
	var id [16]byte
	crand.Read(id[:])

	coll := startCollector(t, ctx, "", addr, dir)
	ra := dialRaw(t, addr, name, id)
	if ra.last != 0 {
		t.Fatalf("first run welcomes a new instance with sequence %d, want 0", ra.last)
	}
	ra.send(t, stream, perBat, 1, batches) // written and acknowledged; the acks are "lost"
	coll.signal(syscall.SIGKILL)
	coll.wait(10 * time.Second)
	ra.conn.Close()

	coll = startCollector(t, ctx, "", addr, dir)
	waitNoPart(t, dir, 5*time.Second) // the unfinished file repaired
	coll.signal(syscall.SIGKILL)      // before the agent is back
	coll.wait(10 * time.Second)

	coll = startCollector(t, ctx, "", addr, dir)
	ra = dialRaw(t, addr, name, id)
	if ra.last != batches {
		t.Errorf("third run welcomes the agent with sequence %d, but batches 1..%d are in a file (written by the first run, repaired by the second)", ra.last, batches)
	}
	// The agent resends what it has no acknowledgement for.
	ra.send(t, stream, perBat, 1, batches)
	ra.conn.Close()
	coll.stop(20 * time.Second)
	s := coll.collectorSummary()
	t.Logf("third collector: %+v", s)
	checkAgentDir(t, filepath.Join(dir, name)).expectExactlyOnce(t, name, map[uint32]uint64{stream: batches * perBat})
}

// rawAgent is a test-driven agent session: one Ethernet interface,
// batches of generated frames.
type rawAgent struct {
	conn net.Conn
	fr   *wire.FrameReader
	last uint64 // the welcome's sequence
}

// dialRaw shakes hands as agent name with instance id.
func dialRaw(t *testing.T, addr, name string, id [16]byte) *rawAgent {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(20 * time.Second))
	h := wire.Hello{Instance: id, Codecs: 1 << wire.CodecNone, Name: name, Host: "e2e-raw-agent",
		Interfaces: []wire.Interface{{Name: "eth0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535}}}
	if _, err := conn.Write(wire.AppendHello(nil, &h)); err != nil {
		t.Fatalf("sending hello: %v", err)
	}
	ra := &rawAgent{conn: conn, fr: wire.NewFrameReader(conn, wire.Limits{})}
	hdr, p, err := ra.fr.Next()
	if err != nil {
		t.Fatalf("waiting for the welcome: %v", err)
	}
	if hdr.Type != wire.TypeWelcome {
		t.Fatalf("hello answered with a %s frame, want welcome", hdr.Type)
	}
	w, err := wire.ParseWelcome(p)
	if err != nil {
		t.Fatal(err)
	}
	ra.last = w.LastSeq
	return ra
}

// send sends batches from..to, each of per 576-byte frames of stream
// (batch s holds sequence numbers (s-1)*per ..), and waits for the
// acknowledgement of batch to.
func (ra *rawAgent) send(t *testing.T, stream uint32, per, from, to uint64) {
	t.Helper()
	buf := make([]byte, 576)
	var enc wire.BatchEncoder
	for seq := from; seq <= to; seq++ {
		enc.Reset(nil)
		for i := range per {
			enc.Append(time.Now().UnixNano(), 0, uint32(len(buf)), gen.Frame(buf, gen.LinkTypeEthernet, stream, (seq-1)*per+i))
		}
		if _, err := ra.conn.Write(enc.Finish(seq)); err != nil {
			t.Fatalf("sending batch %d: %v", seq, err)
		}
	}
	for {
		hdr, p, err := ra.fr.Next()
		if err != nil {
			t.Fatalf("waiting for the acknowledgement of batch %d: %v", to, err)
		}
		if hdr.Type != wire.TypeAck {
			t.Fatalf("got a %s frame, want acks", hdr.Type)
		}
		if seq, err := wire.ParseAck(p); err != nil || seq >= to {
			return
		}
	}
}

// TestDiskFullE2E runs the collector on a small tmpfs that a filler file
// has nearly filled, and replays more than fits. The replay is paced, so
// that batches are acknowledged one by one until the disk is full. The
// collector must then log a storage error and acknowledge nothing more:
// the agent, at the end of its input, keeps retrying instead of
// finishing, and every finished file stays readable, holding a prefix of
// the stream exactly once. Once the filler is deleted the agent must
// finish, every packet be in the files exactly once, and the collector's
// counters agree with the files.
func TestDiskFullE2E(t *testing.T) {
	requireTools(t, checkTools...)
	if os.Geteuid() != 0 {
		missing(t, "needs root to mount a small tmpfs as a full disk (run go test as root)")
	}
	ctx := testContext(t)
	const (
		count  = 50_000 // 64-byte frames: 4 MB of input, about 4.8 MB of output
		stream = 43
		name   = "full"
		free   = 2 << 20 // what the filler leaves free
	)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "in64.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.Mix64, Stream: stream, Seed: 43})

	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=8m,mode=0755"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	dir := filepath.Join(mnt, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	fill(t, filler, avail(t, mnt)-free)
	t.Logf("tmpfs %s: %d bytes free after the filler", mnt, avail(t, mnt))

	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--retain-free", "0") // a full disk, not retention, is the subject
	in := startPacedInput(t, ctx, src, filepath.Join(tmp, "in.fifo"), 2*time.Second)
	agent := startReplay(t, ctx, addr, name, in.path, "--batch-size", "64K")
	coll.waitMetric(20*time.Second, 1, "pcapsync_collector_file_errors_total")
	// The metric may move before the log line is read from the pipe.
	if err := coll.awaitStderr(logNoSpace, 10*time.Second); err != nil {
		t.Errorf("the collector's storage error does not say %q: %v", logNoSpace, err)
	}
	for line := range strings.Lines(coll.stderr.String()) {
		if strings.Contains(line, "storage error") {
			t.Logf("collector: %s", strings.TrimSpace(line))
			break
		}
	}

	// Full: the agent reads the rest of its input, keeps its batches and
	// retries; were they acknowledged, it would finish.
	in.finish(t)
	time.Sleep(time.Second) // a hold proving that nothing happens: the agent must not finish
	if agent.exited() {
		t.Fatalf("agent finished while the disk was full (%v); stdout: %s", agent.cmd.ProcessState, agent.stdout.String())
	}
	if coll.exited() {
		t.Fatalf("collector exited on a full disk (%v)", coll.cmd.ProcessState)
	}
	if err := agent.awaitStderr("connection to collector lost", 10*time.Second); err != nil {
		t.Errorf("agent logged no lost connection while the disk was full: %v", err)
	}
	r := checkFinishedFiles(t, filepath.Join(dir, name))
	n := uint64(r.Packets)
	t.Logf("while full: %d finished files holding %d packets", len(r.Files), n)
	if n == 0 || n >= count {
		t.Errorf("while full the finished files hold %d packets, want some (acknowledged before the disk filled) but not all %d", n, count)
	}
	// What is in the files is what was acknowledged: the stream's first n
	// packets, once each.
	r.expectExactlyOnce(t, name+" while full", map[uint32]uint64{stream: n})

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	s := finishReplay(t, agent, count, 30*time.Second)
	coll.stop(20 * time.Second)
	cs := coll.collectorSummary()
	t.Logf("agent: %+v", s)
	t.Logf("collector: %+v", cs)
	if cs.FileErrors == 0 {
		t.Errorf("collector counted no file errors on a full disk")
	}
	if s.Reconnects == 0 {
		t.Errorf("agent counted no reconnects although the collector dropped it on a full disk")
	}
	if got := agentDirs(t, dir); !slices.Equal(got, []string{name}) {
		t.Errorf("collector dir holds %q, want only [%s]", got, name)
	}
	r = checkAgentDir(t, filepath.Join(dir, name))
	r.expectExactlyOnce(t, name, map[uint32]uint64{stream: count})
	if cs.Packets != uint64(r.Packets) {
		t.Errorf("collector summary counts %d packets written, the files hold %d (batches cut back after a write error still counted?)", cs.Packets, r.Packets)
	}
}

// avail returns the bytes an unprivileged writer may still use below dir.
func avail(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// fill writes a file of n bytes (real blocks: tmpfs does not allocate holes).
func fill(t *testing.T, path string, n int64) {
	t.Helper()
	if n <= 0 {
		t.Fatalf("filler of %d bytes", n)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for n > 0 {
		m := min(n, int64(len(buf)))
		if _, err := f.Write(buf[:m]); err != nil {
			f.Close()
			t.Fatalf("writing filler %s: %v", path, err)
		}
		n -= m
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// checkFinishedFiles is checkAgentDir for a directory whose collector is
// still running: it reads only the finished *.pcapng files (a .part file
// may be being written), each of which must be complete and readable by
// pcapfile.Reader, tshark and capinfos alike.
func checkFinishedFiles(t *testing.T, dir string) *dirReport {
	t.Helper()
	r := &dirReport{Counts: map[key]int{}, Lens: map[key]int{}, IfNames: map[string]int{}}
	files, err := filepath.Glob(filepath.Join(dir, "*.pcapng"))
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range files {
		n := r.readFile(t, path)
		r.Files = append(r.Files, path)
		r.Packets += n
		if got := tsharkCheck(t, path, r.IfNames); got != n {
			t.Errorf("%s: tshark read %d packets, pcapfile.Reader %d", path, got, n)
		}
		if got := capinfosCheck(t, path); got != n {
			t.Errorf("%s: capinfos counts %d packets, pcapfile.Reader %d", path, got, n)
		}
	}
	return r
}

// TestFDsBackToBaseline runs 300 short broken or bounded connections
// against a collector (garbage, half a frame header then close, half a
// header left until the handshake timeout, a hello then a reset, a hello
// then a cut-off frame, a bare reset), with a real replay agent every
// 50th cycle, 8 at a time. Afterwards its open file descriptors must be
// back to what it had after start (+2), its thread count must have
// stopped growing, and the agents' output must be exact.
func TestFDsBackToBaseline(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		cycles  = 300
		workers = 8
		agentN  = 200 // packets per replay agent
		stream  = 45
	)
	src := filepath.Join(t.TempDir(), "small.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: agentN, Mix: gen.MixIMIX, Stream: stream, Seed: 45})
	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, "", addr, dir, "--handshake-timeout", "1s")
	pid := coll.cmd.Process.Pid
	// The baseline once the runtime has started its threads after it
	// got ready: descriptors and threads unchanged over ten samples in a
	// row; the checks below allow slack over it.
	var baseFDs, baseThreads, same int
	testutil.Eventually(t, 5*time.Second, func() error {
		fds, threads := fdCount(t, pid), threadCount(t, pid)
		if fds != baseFDs || threads != baseThreads {
			baseFDs, baseThreads, same = fds, threads, 0
		} else {
			same++
		}
		if same < 10 {
			return fmt.Errorf("%d descriptors, %d threads: settling", fds, threads)
		}
		return nil
	})

	var peak atomic.Int64
	sampled := make(chan struct{})
	stopSampling := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if n, err := countFDs(pid); err == nil && int64(n) > peak.Load() {
				peak.Store(int64(n))
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	defer func() {
		select {
		case <-stopSampling:
		default:
			close(stopSampling)
		}
		<-sampled
	}()

	var agents []string
	runCycles := func(from, to int) {
		t.Helper()
		work := make(chan func() error)
		var mu sync.Mutex
		var errs []string
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for cycle := range work {
					if err := cycle(); err != nil {
						mu.Lock()
						errs = append(errs, err.Error())
						mu.Unlock()
					}
				}
			})
		}
		for i := from; i < to; i++ {
			cycle := func() error { return fdCycle(addr, i) }
			if i%50 == 49 {
				// Started here, on the test goroutine; a worker waits for it.
				name := fmt.Sprintf("fd-agent-%d", i/50)
				agents = append(agents, name)
				p := startReplay(t, ctx, addr, name, src)
				cycle = func() error { return awaitAgent(p, agentN) }
			}
			work <- func() error {
				if err := cycle(); err != nil {
					return fmt.Errorf("cycle %d: %w", i, err)
				}
				return nil
			}
		}
		close(work)
		wg.Wait()
		for _, e := range errs[:min(len(errs), 10)] {
			t.Error(e)
		}
		if len(errs) > 10 {
			t.Errorf("... and %d more failed cycles", len(errs)-10)
		}
	}
	start := time.Now()
	runCycles(0, cycles/2)
	midThreads := threadCount(t, pid)
	runCycles(cycles/2, cycles)
	t.Logf("%d cycles in %v", cycles, time.Since(start).Round(time.Millisecond))
	if coll.exited() {
		t.Fatalf("collector exited (%v)", coll.cmd.ProcessState)
	}

	// Connections the collector has not noticed the end of yet close
	// within a moment (the handshake timeout is 1s).
	fds := fdCount(t, pid)
	testutil.Poll(5*time.Second, func() error { // the check below reports a count still too high
		if fds = fdCount(t, pid); fds > baseFDs+2 {
			return errors.New("descriptors still open")
		}
		return nil
	})
	threads := threadCount(t, pid)
	close(stopSampling)
	<-sampled
	t.Logf("collector fds: %d after start, %d at most during the cycles, %d after; threads: %d after start, %d half way, %d after",
		baseFDs, peak.Load(), fds, baseThreads, midThreads, threads)
	if fds > baseFDs+2 {
		t.Errorf("collector holds %d file descriptors after the cycles, %d after start (+2 allowed): leak; open: %s",
			fds, baseFDs, fdTargets(pid))
	}
	// Go keeps the threads it made, but after the first half of the
	// cycles the second half needs no new ones.
	if threads > midThreads+4 || threads > baseThreads+32 {
		t.Errorf("collector threads grew to %d (%d after start, %d half way)", threads, baseThreads, midThreads)
	}

	coll.stop(20 * time.Second)
	t.Logf("collector: %+v", coll.collectorSummary())
	for _, name := range agentDirs(t, dir) {
		r := checkAgentDir(t, filepath.Join(dir, name))
		switch {
		case slices.Contains(agents, name):
			r.expectExactlyOnce(t, name, map[uint32]uint64{stream: agentN})
		case r.Packets != 0:
			t.Errorf("%s holds %d packets but no agent of that name sent any", name, r.Packets)
		}
	}
	for _, name := range agents {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("agent %s: %v", name, err)
		}
	}
}

// fdCycle is one short connection to the collector of kind i%6, bounded
// by a 5s deadline.
// helloMu serializes the cycles that say hello under the same name.
var helloMu [5]sync.Mutex

func fdCycle(addr string, i int) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	c := conn.(*net.TCPConn)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	halfHeader := wire.AppendHeader(nil, wire.TypeHello, 0, 100)[:wire.HeaderSize/2]
	switch i % 6 {
	case 0: // garbage: the collector closes it
		if err := write(c, []byte("GET / HTTP/1.1\r\nHost: pcapsync\r\n\r\n")); err != nil {
			return err
		}
		return awaitClose(c)
	case 1: // half a frame header, then gone
		return write(c, halfHeader)
	case 2: // half a frame header, then silence until the handshake timeout
		if err := write(c, halfHeader); err != nil {
			return err
		}
		return awaitClose(c)
	case 3: // a valid hello, then a reset
		// One cycle per name at a time: a second hello of the same name
		// takes over, and may end the first before its welcome (right
		// for agents, which retry; not what this cycle checks).
		helloMu[i%5].Lock()
		defer helloMu[i%5].Unlock()
		if err := welcomed(c, fmt.Sprintf("fd-hello-%d", i%5)); err != nil {
			return err
		}
		return c.SetLinger(0)
	case 4: // a valid hello, then half a batch frame header, then gone
		helloMu[i%5].Lock()
		defer helloMu[i%5].Unlock()
		if err := welcomed(c, fmt.Sprintf("fd-hello-%d", i%5)); err != nil {
			return err
		}
		return write(c, wire.AppendHeader(nil, wire.TypeBatch, 0, 1000)[:wire.HeaderSize/2])
	default: // connect, then a reset
		return c.SetLinger(0)
	}
}

// welcomed shakes hands as agent name and requires a welcome.
func welcomed(c net.Conn, name string) error {
	h, _, err := hello(c, name)
	if err != nil {
		return err
	}
	if h.Type != wire.TypeWelcome {
		return fmt.Errorf("hello %q answered with a %s frame, want welcome", name, h.Type)
	}
	return nil
}

// awaitClose reads until the collector closes the connection.
func awaitClose(c *net.TCPConn) error {
	if _, err := io.Copy(io.Discard, c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("waiting for the collector to close the connection: %w", err)
	}
	return nil
}

// awaitAgent waits for a replay agent to exit 0 with all n packets
// acknowledged.
func awaitAgent(p *proc, n uint64) error {
	code, err := p.awaitExit(20 * time.Second)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("%s exited with code %d", p.name, code)
	}
	s, err := agentSummary(p)
	if err != nil {
		return err
	}
	if s.Acked != n || s.Unacked != 0 {
		return fmt.Errorf("%s: want %d packets acknowledged, none left: %s", p.name, n, s)
	}
	return nil
}

func countFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(ents), err
}

func fdCount(t *testing.T, pid int) int {
	t.Helper()
	n, err := countFDs(pid)
	if err != nil {
		t.Fatalf("counting open files of pid %d: %v", pid, err)
	}
	return n
}

// fdTargets lists what pid's descriptors point at.
func fdTargets(pid int) string {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, e.Name()+"->"+target)
	}
	return strings.Join(out, " ")
}

func threadCount(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("reading the status of pid %d: %v", pid, err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("pid %d: bad Threads line %q", pid, line)
			}
			return n
		}
	}
	t.Fatalf("pid %d: no Threads line in its status", pid)
	return 0
}

// repairCounts tallies what the collectors' restarts found in their
// logs: unfinished files finished as they were or cut back to their last
// mark (repaired, of which cut), and files removed for holding no mark.
func repairCounts(colls []*proc) (repaired, cut, removed int) {
	for _, p := range colls {
		for line := range strings.Lines(p.stderr.String()) {
			switch {
			case strings.Contains(line, "repaired unfinished file"):
				repaired++
				if !strings.Contains(line, " cut_bytes=0") {
					cut++
				}
			case strings.Contains(line, "removed unfinished file"):
				removed++
			}
		}
	}
	return repaired, cut, removed
}
