//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// TestFailoverToSecondCollector: one agent replays a stream with
// --collector A,B; collector A, writing its own root, is killed with
// SIGKILL mid-stream; the agent fails over to B, writing another root,
// and finishes with every packet acknowledged. Two collectors cannot
// share a root at once (the state file and the .part files are one
// collector's), so each has its own, and the contract checked is the
// one docs/reliability.md states for that case:
//   - every packet is in A's files or B's, readable by tshark and
//     capinfos; no root holds a packet twice;
//   - A holds the stream from its start up to some packet, B from some
//     packet to its end, with no gap between them: what both hold is the
//     batches A wrote but had not acknowledged when it died, which the
//     agent resent to B;
//   - B's files start right after what A acknowledged (the agent logs it
//     as resume_after_seq), and B, which never saw the batches before,
//     counts them as missing: that count is exactly A's acknowledged
//     batches, not a loss.
func TestFailoverToSecondCollector(t *testing.T) {
	requireTools(t, checkTools...)
	ctx := testContext(t)
	const (
		count    = 100_000 // 64-byte frames
		stream   = 61
		name     = "fo"
		feedTime = 4 * time.Second
	)
	tmp := t.TempDir()
	src := filepath.Join(tmp, "in64.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.Mix64, Stream: stream, Seed: 61})
	in := startPacedInput(t, ctx, src, filepath.Join(tmp, "in.fifo"), feedTime)

	dirA, dirB := t.TempDir(), t.TempDir()
	addrA := freeport.Addr(t)
	addrB := freeport.Addr(t)
	collA := startCollector(t, ctx, "", addrA, dirA)
	collB := startCollector(t, ctx, "", addrB, dirB)
	agent := startReplay(t, ctx, addrA+","+addrB, name, in.path, "--batch-size", "64K")
	collA.waitSessions(1, 10*time.Second)

	// A third of the stream through A, then A dies.
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatal(err)
	}
	waitFed(t, in, fi.Size(), 0.33, 15*time.Second)
	collA.signal(syscall.SIGKILL)
	if code := collA.wait(10 * time.Second); code != -1 {
		t.Fatalf("collector A exited with code %d before it was killed", code)
	}
	in.finish(t)
	s := finishReplay(t, agent, count, 30*time.Second)
	collB.stop(20 * time.Second)
	if s.Failovers != 1 {
		t.Errorf("agent counted %d failovers, want 1 (A -> B, then B to the end)", s.Failovers)
	}
	resumed := resumeAfter(t, agent, addrB)

	// A's unfinished files are repaired when it runs again.
	collA = startCollector(t, ctx, "", addrA, dirA)
	collA.stop(20 * time.Second)

	rA := checkAgentDir(t, filepath.Join(dirA, name))
	rB := checkAgentDir(t, filepath.Join(dirB, name))
	firstA, lastA := span(t, "A", rA, stream, count)
	firstB, lastB := span(t, "B", rB, stream, count)
	if firstA != 0 || lastB != count-1 || firstB > lastA+1 {
		t.Errorf("A holds packets %d..%d, B %d..%d: want A from the start, B to the end, no gap between", firstA, lastA, firstB, lastB)
	}
	overlap := max(0, int(lastA)-int(firstB)+1)

	var sumB collectorSummary
	if err := decodeSummary(collB, &sumB); err != nil {
		t.Fatal(err)
	}
	if sumB.MissingBatches != resumed || resumed == 0 {
		t.Errorf("B counts %d batches missing; the agent resumed at B after batch %d (A's acknowledged ones): want them equal, not 0",
			sumB.MissingBatches, resumed)
	}
	t.Logf("RELIABILITY: failover A -> B after SIGKILL of A (%d x 64-byte packets, 64 KiB batches, separate roots): "+
		"A holds packets %d..%d, B %d..%d, in both %d (written by A, not acknowledged), lost 0; agent failovers %d, reconnects %d; "+
		"B counts %d batches missing (acknowledged by A)",
		count, firstA, lastA, firstB, lastB, overlap, s.Failovers, s.Reconnects, sumB.MissingBatches)
}

// waitFed waits until the feeder wrote frac of its input of total bytes.
func waitFed(t *testing.T, in *pacedInput, total int64, frac float64, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, func() error {
		if n := in.written.Load(); float64(n) < frac*float64(total) {
			return fmt.Errorf("fed %d of %d bytes", n, total)
		}
		return nil
	})
}

// resumeRE matches the agent's log line for a connection: its address
// and the batch it resumes after.
var resumeRE = regexp.MustCompile(`msg="connected to collector".* addr=(\S+) resume_after_seq=(\d+)`)

// resumeAfter returns the batch the agent's first connection to addr
// resumed after.
func resumeAfter(t *testing.T, p *proc, addr string) uint64 {
	t.Helper()
	for _, m := range resumeRE.FindAllStringSubmatch(p.stderr.String(), -1) {
		if m[1] == addr {
			n, _ := strconv.ParseUint(m[2], 10, 64)
			return n
		}
	}
	t.Fatalf("%s never logged a connection to %s:\n%s", p.name, addr, p.stderr.String())
	return 0
}

// span returns the first and last sequence of stream's packets in r,
// failing t unless they are every packet between, each once.
func span(t *testing.T, what string, r *dirReport, stream uint32, count uint64) (first, last uint64) {
	t.Helper()
	first, last = count, 0
	n := 0
	for k, c := range r.Counts {
		if k.stream != stream || k.seq >= count {
			t.Errorf("%s: unexpected packet %v", what, k)
			continue
		}
		if c != 1 {
			t.Errorf("%s: packet %d is there %d times", what, k.seq, c)
		}
		first, last = min(first, k.seq), max(last, k.seq)
		n++
	}
	if n == 0 {
		t.Fatalf("%s holds no packet", what)
	}
	if want := int(last - first + 1); n != want {
		t.Errorf("%s holds %d packets between %d and %d, want all %d: a gap", what, n, first, last, want)
	}
	return first, last
}
