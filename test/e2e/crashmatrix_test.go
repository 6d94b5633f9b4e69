//go:build linux

package e2e

// The crash matrix: the delivery contract checked across wire and file
// compression, payloads, packet sizes, rotation and free disk space,
// with the collector killed at random moments, and, for a live agent
// with a spool, the agent too. See TestCrashMatrix.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// Environment of TestCrashMatrix.
const (
	// crashSeedEnv chooses the seed (an unsigned integer); without it the
	// seed is the time. Every random choice of the run derives from it.
	crashSeedEnv = "PCAPSYNC_CRASH_SEED"
	// crashCellsEnv is how many cells run, chosen by the seed, or "all".
	crashCellsEnv = "PCAPSYNC_CRASH_CELLS"
	// crashDeadlineEnv (Unix seconds), when set, skips the cells that
	// would start after it (scripts/soak.sh ends its last round with it).
	crashDeadlineEnv = "PCAPSYNC_CRASH_DEADLINE"
)

const (
	// crashCellsCI is how many cells run by default: the CI run.
	crashCellsCI = 6
	// crashCellTimeout bounds one cell, repairs and checks included.
	crashCellTimeout = 3 * time.Minute
	// crashListen bounds a collector's start after a kill: repair of
	// what the killed run left must finish within it.
	crashListen = 60 * time.Second
	// maxEthernetPacket is the longest Ethernet packet Wireshark reads
	// (its WTAP_MAX_PACKET_SIZE_STANDARD). A longer packet must reach the
	// files cut to this length with its original length kept, like a
	// packet cut by a snaplen.
	maxEthernetPacket = 262144
	// crashStream is the stream id of every cell's packets.
	crashStream = 61
	// crashTSStart and crashTSStep are the reference packets' timestamps
	// (whole microseconds: the reference is a microsecond pcap file).
	crashTSStart = 1767225600_000000000
	crashTSStep  = 1_234_000
)

// crashCell is one combination of the matrix's dimensions. A replay
// cell (live false) uses every field; a live spool cell (live true)
// only wire and file (see runSpoolCell).
type crashCell struct {
	index       int
	live        bool   // live capture with --spool, agent and collector killed; else a file replay, the collector killed
	wire        string // agent --compress: none, s2, zstd
	file        string // collector --file-compress: none, gzip, zstd
	text        bool   // compressible (text) payloads, else pseudo-random bytes
	big         bool   // sizes up to maxEthernetPacket and beyond, else IMIX
	smallRotate bool   // --rotate-size 4M, else the default
	full        bool   // a nearly full tmpfs, else plenty of space
}

// String names the cell; it is the subtest's name.
func (c crashCell) String() string {
	if c.live {
		return fmt.Sprintf("live-spool_wire-%s_file-%s", c.wire, c.file)
	}
	pick := func(b bool, yes, no string) string {
		if b {
			return yes
		}
		return no
	}
	return fmt.Sprintf("wire-%s_file-%s_%s_%s_rot-%s_disk-%s", c.wire, c.file,
		pick(c.text, "text", "random"), pick(c.big, "big", "imix"),
		pick(c.smallRotate, "4M", "default"), pick(c.full, "full", "plenty"))
}

// collectorFlags are the collector's flags for the cell's file
// compression (level 1, the fastest) and rotation.
func (c crashCell) collectorFlags() []string {
	args := []string{"--file-compress", map[string]string{"none": "none", "gzip": "gzip:1", "zstd": "zstd:1"}[c.file]}
	if c.smallRotate {
		args = append(args, "--rotate-size", "4M")
	}
	if c.full {
		args = append(args, "--retain-free", "0") // repair short of space is the subject, not retention
	}
	return args
}

var (
	crashWires = []string{"none", "s2", "zstd"}
	crashFiles = []string{"none", "gzip", "zstd"}
)

// crashCells lists every cell in the order they run (crashOrder): the
// 9 live spool cells, which take seconds, so that every round of
// scripts/soak.sh, however short, runs them, then the 144 replay cells.
// A cell's index, fixed, seeds its random choices: the replay cells
// are 0-143, the live spool cells 144-152.
func crashCells() []crashCell {
	var cells []crashCell
	for _, wire := range crashWires {
		for _, file := range crashFiles {
			for _, text := range []bool{false, true} {
				for _, big := range []bool{false, true} {
					for _, small := range []bool{false, true} {
						for _, full := range []bool{false, true} {
							cells = append(cells, crashCell{index: len(cells), wire: wire, file: file,
								text: text, big: big, smallRotate: small, full: full})
						}
					}
				}
			}
		}
	}
	for _, wire := range crashWires {
		for _, file := range crashFiles {
			cells = append(cells, crashCell{index: len(cells), live: true, wire: wire, file: file})
		}
	}
	slices.SortFunc(cells, crashOrder)
	return cells
}

// crashOrder orders cells as they run: live spool cells first, then by
// index.
func crashOrder(a, b crashCell) int {
	if a.live != b.live {
		if a.live {
			return -1
		}
		return 1
	}
	return a.index - b.index
}

// crashSeed returns the run's seed: crashSeedEnv, or the time.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	s := os.Getenv(crashSeedEnv)
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want an unsigned integer", crashSeedEnv, s)
	}
	return seed
}

// crashSelect returns the cells this run covers, in crashOrder: all,
// or crashCellsEnv of them (crashCellsCI by default) chosen by seed:
// live spool cells one in six (rounded to nearest, at least one of
// three or more), replay cells with text payloads, which move 8 times
// the bytes of the others and take most of a run's time, a third
// (rounded down), and replay cells with random payloads the rest. A
// kind with too few cells leaves its share to the others.
func crashSelect(t *testing.T, seed uint64, cells []crashCell) []crashCell {
	t.Helper()
	s := os.Getenv(crashCellsEnv)
	if s == "all" {
		return cells
	}
	n := crashCellsCI
	if s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number or \"all\"", crashCellsEnv, s)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x63656c6c73)) // "cells"
	var live, text, random []crashCell
	for _, c := range cells {
		switch {
		case c.live:
			live = append(live, c)
		case c.text:
			text = append(text, c)
		default:
			random = append(random, c)
		}
	}
	nLive := (n + 3) / 6
	if n >= 3 {
		nLive = max(nLive, 1)
	}
	kinds := []struct {
		cells []crashCell
		want  int
	}{{live, nLive}, {text, n / 3}, {random, n - nLive - n/3}}
	var out []crashCell
	for i := range kinds {
		k := &kinds[i]
		rng.Shuffle(len(k.cells), func(i, j int) { k.cells[i], k.cells[j] = k.cells[j], k.cells[i] })
		take := min(k.want, len(k.cells))
		out = append(out, k.cells[:take]...)
		k.cells = k.cells[take:]
	}
	for i := 0; len(out) < n && i < len(kinds); i++ { // a kind had too few
		take := min(n-len(out), len(kinds[i].cells))
		out = append(out, kinds[i].cells[:take]...)
		kinds[i].cells = kinds[i].cells[take:]
	}
	slices.SortFunc(out, crashOrder)
	return out
}

// TestCrashMatrix checks the delivery contract of docs/reliability.md
// in 153 cells: 144 replay cells and 9 live spool cells.
//
// The replay cells cover {wire compression none, s2, zstd} x {file
// compression none, gzip:1, zstd:1} x {pseudo-random, text payloads} x
// {IMIX, big packets} x {--rotate-size 4M, default rotation} x {plenty
// of space, a nearly full tmpfs}. Each replay cell replays a reference capture
// whose every packet carries its stream and sequence number (16 MiB of
// random payloads, 128 MiB of text) through a FIFO whose last bytes are
// held back until the last kill, SIGKILLs the collector 1-3 times at
// points of the input the seed chose (see crashKills) and restarts it
// on the same directory, lets the agent finish, and compares every
// packet of the finished files with the reference: each exactly once,
// bytes, original length and timestamp identical (a packet longer than
// maxEthernetPacket cut to it, its original length kept), every file
// read whole by pcapfile.Reader, tshark and capinfos, no LOST batches.
//
// A nearly full cell's directory is a tmpfs with room for the cell's
// output and 4 MiB: repair runs short of space. When a collector runs
// out of space, and before a last restart after the agent finished (to
// finish what a repair short of space left), the test removes the
// filler, which frees as much again.
//
// A replay cell's agent replays a file, so only the collector is
// killed: a replay agent killed and restarted reads its file from the
// beginning as a new instance, and everything would be written twice,
// by design. The live spool cells kill the agent too: {wire
// compression none, s2, zstd} x {file compression none, gzip:1,
// zstd:1}, each an agent with --spool capturing on a veth between two
// network namespaces while gen udp sends 3-5 streams of 300-3000
// packets, through a seeded sequence of events (spoolPlan): the
// collector SIGKILLed and restarted at any moment (between streams,
// part way through one, while the restarted agent resends its spool),
// the agent SIGKILLed and restarted on its spool once all it captured
// was sealed (the contract loses the batch being built on an agent
// crash), at least once holding a stream that only its spool has. At
// the end both stop cleanly and every packet of every stream must be
// in the files exactly once, read whole by tshark and capinfos, no
// LOST or missing batches (see runSpoolCell).
//
// The seed (crashSeedEnv, default the time) picks the cells
// (crashCellsEnv: a number, default crashCellsCI, or "all"; of a
// number, one in six is a live spool cell, see crashSelect) and, per
// cell, the packet sizes, the batch size, and the number and points of
// the kills, or a spool cell's plan; it is logged at start and with
// every failure. Kill points are fractions of the input the agent has
// read, or of a stream the agent captured, so where a kill falls in the
// stream repeats with the seed; what the processes were doing at that
// instant does not, exactly. scripts/soak.sh runs all cells round after round
// with new seeds.
func TestCrashMatrix(t *testing.T) {
	requireTools(t, checkTools...)
	if os.Geteuid() != 0 {
		missing(t, "needs root to mount the nearly full tmpfs of half the replay cells and the network namespaces of the live cells (run go test as root)")
	}
	seed := crashSeed(t)
	cells := crashSelect(t, seed, crashCells())
	var deadline time.Time
	if s := os.Getenv(crashDeadlineEnv); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want Unix seconds", crashDeadlineEnv, s)
		}
		deadline = time.Unix(sec, 0)
	}
	t.Logf("crash matrix seed %d (%s), %d cells; reproduce: %s=%d %s=%s go test -run TestCrashMatrix ./test/e2e",
		seed, crashSeedEnv, len(cells), crashSeedEnv, seed, crashCellsEnv, orDefault(os.Getenv(crashCellsEnv), strconv.Itoa(crashCellsCI)))
	for _, c := range cells {
		t.Run(c.String(), func(t *testing.T) {
			if !deadline.IsZero() && time.Now().After(deadline) {
				t.Skipf("%s passed", crashDeadlineEnv)
			}
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("FAILED cell %s, seed %d; reproduce: %s=%d %s=all go test -run 'TestCrashMatrix/^%s$' ./test/e2e",
						c, seed, crashSeedEnv, seed, crashCellsEnv, c)
				}
			})
			if c.live {
				runSpoolCell(t, seed, c)
			} else {
				runCrashCell(t, seed, c)
			}
		})
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// crashRef is a cell's reference capture, the file the agent replays.
type crashRef struct {
	path  string
	text  bool
	sizes []int32 // original length of the frame of each sequence number
	bytes int64   // sum of sizes
}

// frame builds the frame of packet seq in buf (at least its size).
func (r *crashRef) frame(buf []byte, seq uint64) []byte {
	f := gen.Frame(buf[:r.sizes[seq]], gen.LinkTypeEthernet, crashStream, seq)
	if r.text {
		gen.TextPayload(f[14+20+8:], crashStream, seq)
	}
	return f
}

func crashTS(seq uint64) int64 { return crashTSStart + int64(seq)*crashTSStep }

// crashSizes draws frame sizes until they add up to budget bytes: IMIX
// (64, 576, 1500 bytes, 7:4:1), or with big, also sizes from 1501 to
// 65535, to maxEthernetPacket, exactly maxEthernetPacket, and over it
// up to the largest a replay accepts (pcapfile.DefaultMaxPacket).
func crashSizes(rng *rand.Rand, big bool, budget int64) []int32 {
	var sizes []int32
	for sum := int64(0); sum < budget; {
		var n int
		switch r := rng.IntN(100); {
		case !big || r < 70:
			n = [...]int{64, 64, 64, 64, 64, 64, 64, 576, 576, 576, 576, 1500}[rng.IntN(12)]
		case r < 85:
			n = 1501 + rng.IntN(65535-1501+1)
		case r < 94:
			n = 65536 + rng.IntN(maxEthernetPacket-65536+1)
		case r < 97:
			n = maxEthernetPacket
		default:
			n = maxEthernetPacket + 1 + rng.IntN(pcapfile.DefaultMaxPacket-maxEthernetPacket)
		}
		sizes = append(sizes, int32(n))
		sum += int64(n)
	}
	return sizes
}

// writeCrashRef writes the reference capture: a microsecond pcap file
// whose snaplen admits its largest packet.
func writeCrashRef(t *testing.T, path string, ref *crashRef) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	snap := uint32(maxEthernetPacket)
	for _, n := range ref.sizes {
		snap = max(snap, uint32(n))
		ref.bytes += int64(n)
	}
	w, err := pcapfile.NewPcapWriter(bw, gen.LinkTypeEthernet, snap, false)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, snap)
	for seq := range uint64(len(ref.sizes)) {
		fr := ref.frame(buf, seq)
		if err := w.WritePacket(crashTS(seq), uint32(len(fr)), fr); err != nil {
			t.Fatalf("writing %s: %v", path, err)
		}
	}
	if err := errors.Join(bw.Flush(), f.Close()); err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
	ref.path = path
}

// wantCaptured is the captured length a packet of n bytes must have in
// the files.
func wantCaptured(n int) int { return min(n, maxEthernetPacket) }

// expectedOutput estimates the bytes a cell's files take: the packet
// blocks, compressed as the collector would (the ratio measured on the
// reference's first 4 MiB).
func expectedOutput(t *testing.T, ref *crashRef, file string) int64 {
	t.Helper()
	var n int64
	for _, s := range ref.sizes {
		n += 32 + int64(wantCaptured(int(s))+3)&^3
	}
	if file == "none" {
		return n
	}
	f, err := os.Open(ref.path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sample, err := io.ReadAll(io.LimitReader(f, 4<<20))
	if err != nil {
		t.Fatal(err)
	}
	var packed int
	switch file {
	case "gzip":
		var b bytes.Buffer
		zw, _ := kgzip.NewWriterLevel(&b, 1)
		zw.Write(sample)
		zw.Close()
		packed = b.Len()
	case "zstd":
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
		if err != nil {
			t.Fatal(err)
		}
		packed = len(enc.EncodeAll(sample, nil))
		enc.Close()
	}
	return max(n*int64(packed)/int64(len(sample)), 64<<10)
}

// crashPlan is what the seed chose for a cell.
type crashPlan struct {
	batch string    // agent --batch-size
	kills []float64 // fractions of the input read at which the collector is killed
}

// crashKills draws 1-3 kill points, as fractions of the input: one
// collector run (which, at random) writes 65-80% of the stream before
// its kill, so that repair meets a file as large as a cell can make,
// the other kills fall at random in the rest, and the last run, after
// the last kill, writes 5-15%.
func crashKills(rng *rand.Rand) []float64 {
	k := 1 + rng.IntN(3)
	long := 0.65 + 0.15*rng.Float64()
	tail := 0.05 + 0.10*rng.Float64()
	// k-1 cuts split what is left among the other runs.
	cuts := []float64{0, 1 - long - tail}
	for range k - 1 {
		cuts = append(cuts, cuts[1]*rng.Float64())
	}
	slices.Sort(cuts)
	longRun := rng.IntN(k)
	var points []float64
	at := 0.0
	for i := range k {
		if i == longRun {
			at += long
		}
		at += cuts[i+1] - cuts[i]
		points = append(points, at)
	}
	return points
}

// runCrashCell runs one replay cell; see TestCrashMatrix.
func runCrashCell(t *testing.T, seed uint64, c crashCell) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), crashCellTimeout)
	t.Cleanup(cancel)
	rng := rand.New(rand.NewPCG(seed, uint64(c.index)))

	// Random payloads do not compress: a smaller stream suffices. Text
	// compresses about 10:1 on the wire, and acknowledgements come per
	// wire bytes, so it takes a larger stream for a gzip member or zstd
	// flush to hold more than a commit's worth of wire bytes.
	budget := int64(16 << 20)
	if c.text {
		budget = 128 << 20
	}
	ref := &crashRef{text: c.text, sizes: crashSizes(rng, c.big, budget)}
	plan := crashPlan{batch: [...]string{"64K", "256K", "1M"}[rng.IntN(3)], kills: crashKills(rng)}
	tmp := t.TempDir()
	writeCrashRef(t, filepath.Join(tmp, "ref.pcap"), ref)
	count := uint64(len(ref.sizes))
	expect := expectedOutput(t, ref, c.file)
	generated := time.Since(began)

	dir := t.TempDir()
	var filler string
	if c.full {
		dir, filler = nearlyFullDir(t, expect)
	}
	const name = "crash"
	agentDir := filepath.Join(dir, name)
	addr := freeport.Addr(t)
	collArgs := c.collectorFlags()
	t.Logf("cell %s, seed %d: %d packets (%d bytes, largest %d), batches %s, kills at %.2f of the input, ~%d output bytes",
		c, seed, count, ref.bytes, slices.Max(ref.sizes), plan.batch, plan.kills, expect)

	// startColl starts a collector and waits until it listens: after a
	// kill, once it has repaired what the killed run left.
	var colls []*proc
	var slowest time.Duration
	startColl := func() *proc {
		t.Helper()
		began := time.Now()
		args := append([]string{"collector", "--listen", addr, "--dir", dir}, withMetrics(t, collArgs)...)
		p := startProc(t, ctx, "collector", "", args...)
		colls = append(colls, p)
		if err := p.awaitReady(crashListen); err != nil {
			t.Fatalf("cell %s, seed %d: collector start %d (after %d kills): %v", c, seed, len(colls), len(colls)-1, err)
		}
		slowest = max(slowest, time.Since(began))
		return p
	}
	// freeSpace removes the filler of a nearly full cell: when a
	// collector ran out of space, and before the final restart.
	freeSpace := func(why string) {
		if filler == "" {
			return
		}
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
		filler = ""
		t.Logf("filler removed: %s", why)
	}
	outOfSpace := func() bool {
		for _, p := range colls {
			if strings.Contains(p.stderr.String(), "no space left on device") {
				return true
			}
		}
		return false
	}

	// The agent replays the file through a FIFO at full speed, but its
	// last bytes are held back until the last kill: it cannot finish
	// before every kill landed, and the kills fall at fractions of the
	// input the agent has read, whatever the compression.
	in := startPacedInput(t, ctx, ref.path, filepath.Join(tmp, "ref.fifo"), 0)
	st, err := os.Stat(ref.path)
	if err != nil {
		t.Fatal(err)
	}
	coll := startColl()
	agent := startReplay(t, ctx, addr, name, in.path, "--compress", c.wire, "--batch-size", plan.batch)
	kills := 0
	for !agent.exited() {
		if kills == len(plan.kills) {
			in.releaseTail()
		}
		if kills < len(plan.kills) && in.written.Load() >= int64(plan.kills[kills]*float64(st.Size())) {
			coll.signal(syscall.SIGKILL)
			if code := coll.wait(10 * time.Second); code != -1 {
				t.Fatalf("cell %s, seed %d: collector exited with code %d before it was killed", c, seed, code)
			}
			kills++
			coll = startColl()
			continue
		}
		if filler != "" && outOfSpace() {
			freeSpace("a collector ran out of space")
		}
		if ctx.Err() != nil {
			t.Fatalf("cell %s, seed %d: the agent did not finish within %v (%d kills)", c, seed, crashCellTimeout, kills)
		}
		time.Sleep(5 * time.Millisecond) // the pace of this loop, which watches several conditions at once
	}
	in.finish(t)
	s := finishReplay(t, agent, count, time.Second)
	coll.stop(20 * time.Second)
	summaries := []collectorSummary{coll.collectorSummary()}
	if c.full {
		// A repair short of space may have left a file unfinished (its
		// marks still counting): with space back, the next start
		// finishes it.
		freeSpace("the run is over; a last restart finishes what repair left")
		coll = startColl()
		coll.stop(20 * time.Second)
		summaries = append(summaries, coll.collectorSummary())
	}

	if got := agentDirs(t, dir); !slices.Equal(got, []string{name}) {
		t.Errorf("cell %s, seed %d: collector dir holds %q, want only [%s]", c, seed, got, name)
	}
	ran := time.Since(began)
	r := checkAgentDir(t, agentDir)
	want := map[uint32]uint64{crashStream: count}
	lost, dup, unexpected := r.tally(want)
	bad, firstBad := compareWithRef(t, r.Files, ref)
	if kills == 0 {
		t.Errorf("cell %s, seed %d: the agent finished before the first kill point (%.2f of the input): no crash was tested",
			c, seed, plan.kills[0])
	}
	if lost+dup+unexpected+bad+r.Other+len(r.Corrupt) > 0 {
		t.Errorf("cell %s, seed %d: %d packets sent, the files hold %d: lost %d, duplicated %d, unexpected %d, "+
			"differing from the reference %d, not generated %d, corrupt payloads %d%s%s",
			c, seed, count, r.Packets, lost, dup, unexpected, bad, r.Other, len(r.Corrupt),
			firstMissing(r, want), firstBad)
	}
	repaired, cut, removed := repairCounts(colls)
	t.Logf("CRASHCELL %s: %v (generate %v, run %v, check %v), %d packets, kills %d, slowest start %v, files %d, agent reconnects %d, "+
		"repaired %d (%d cut back), removed %d, collector duplicates dropped %d; lost %d, dup %d, unexpected %d, differing %d",
		c, time.Since(began).Round(100*time.Millisecond), generated.Round(100*time.Millisecond), (ran - generated).Round(100*time.Millisecond),
		(time.Since(began) - ran).Round(100*time.Millisecond), count, kills, slowest.Round(10*time.Millisecond), len(r.Files),
		s.Reconnects, repaired, cut, removed, summaries[0].Duplicates, lost, dup, unexpected, bad)
}

// nearlyFullDir mounts a tmpfs for a cell whose output takes about
// expect bytes, fills it so that expect + 4 MiB stay free, and returns
// the collector's directory on it and the filler's path. Removing the
// filler frees as much again plus 12 MiB: room for the largest repair.
func nearlyFullDir(t *testing.T, expect int64) (dir, filler string) {
	t.Helper()
	mnt := t.TempDir()
	size := (2*expect + 16<<20 + 1<<20 - 1) &^ (1<<20 - 1)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=0755", size)); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	dir = filepath.Join(mnt, "out")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	filler = filepath.Join(mnt, "filler")
	fill(t, filler, avail(t, mnt)-expect-4<<20)
	return dir, filler
}

// compareWithRef reads every packet of files and compares each packet
// of the reference stream with the reference: captured bytes, original
// length, timestamp. It returns how many differ and a description of
// the first.
func compareWithRef(t *testing.T, files []string, ref *crashRef) (bad int, first string) {
	t.Helper()
	buf := make([]byte, pcapfile.DefaultMaxPacket)
	for _, path := range files {
		f, err := pcapfile.Open(path)
		if err != nil {
			t.Fatalf("opening %s: %v", path, err)
		}
		rd, err := pcapfile.NewReader(f, nil)
		if err != nil {
			f.Close()
			continue // checkAgentDir reported it
		}
		var p pcapfile.Packet
		for n := 1; ; n++ {
			if err := rd.ReadInto(&p); err != nil {
				break // checkAgentDir reported any error but EOF
			}
			// The identity only: the comparison checks every byte.
			const id = 14 + 20 + 8
			if len(p.Data) < id+gen.PayloadHeader || binary.BigEndian.Uint32(p.Data[id+4:]) != crashStream {
				continue // counted by the tally
			}
			seq := binary.BigEndian.Uint64(p.Data[id+8:])
			if seq >= uint64(len(ref.sizes)) {
				continue
			}
			size := int(ref.sizes[seq])
			want := ref.frame(buf, seq)[:wantCaptured(size)]
			var what string
			switch {
			case len(p.Data) != len(want) || int(p.OrigLen) != size:
				what = fmt.Sprintf("captured %d bytes of %d, want %d of %d", len(p.Data), p.OrigLen, len(want), size)
			case !bytes.Equal(p.Data, want):
				i := 0
				for i < len(want) && p.Data[i] == want[i] {
					i++
				}
				what = fmt.Sprintf("bytes differ from offset %d of %d", i, len(want))
			case p.Timestamp != crashTS(seq):
				what = fmt.Sprintf("timestamp %d, want %d", p.Timestamp, crashTS(seq))
			default:
				continue
			}
			if bad++; bad == 1 {
				first = fmt.Sprintf("; first differing packet: seq %d (%s packet %d): %s", seq, filepath.Base(path), n, what)
			}
		}
		f.Close()
	}
	return bad, first
}

// firstMissing names the first lost and the first duplicated sequence
// numbers of want, each part after "; ".
func firstMissing(r *dirReport, want map[uint32]uint64) string {
	var lost, dup []string
	for stream, n := range want {
		for seq := range n {
			switch c := r.Counts[key{stream, seq}]; {
			case c == 0 && len(lost) < 3:
				lost = append(lost, strconv.FormatUint(seq, 10))
			case c > 1 && len(dup) < 3:
				dup = append(dup, fmt.Sprintf("%d (x%d)", seq, c))
			}
		}
	}
	var b strings.Builder
	if len(lost) > 0 {
		fmt.Fprintf(&b, "; first lost seq %s", strings.Join(lost, ", "))
	}
	if len(dup) > 0 {
		fmt.Fprintf(&b, "; first duplicated seq %s", strings.Join(dup, ", "))
	}
	return b.String()
}
