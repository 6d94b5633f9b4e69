//go:build linux

package e2e

// The crash matrix's live spool cells: runSpoolCell.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

const (
	// spoolFlush is the agent's --flush-interval in the spool cells.
	spoolFlush = 50 * time.Millisecond
	// spoolPort is the UDP port the streams go to; the agent's filter
	// selects it.
	spoolPort = 5555
	// spoolWait bounds each wait of a spool cell for one thing to
	// happen: a process to start, exit or log, a counter to move.
	spoolWait = 20 * time.Second
	// spoolSettle bounds the wait, at the end, for the agent to
	// reconnect (its backoff reaches 5 s) and have everything
	// acknowledged.
	spoolSettle = 30 * time.Second
)

// spoolAction is what one step of a spool cell's plan does.
type spoolAction int

const (
	spoolCollStart      spoolAction = iota // start the collector, wait until it listens
	spoolCollKill                          // SIGKILL the collector
	spoolAgentStart                        // start the agent on its spool, wait until it captures
	spoolAgentKill                         // wait until everything sent is sealed, then SIGKILL the agent
	spoolSend                              // send a stream, and with killAt, SIGKILL the collector part way
	spoolCollKillResend                    // SIGKILL the collector delay after the restarted agent connected
)

// spoolStep is one event of a spool cell's plan.
type spoolStep struct {
	do     spoolAction
	stream uint32        // spoolSend: the stream id
	count  int           // spoolSend: packets
	rate   int           // spoolSend: packets per second
	killAt float64       // spoolSend: kill the collector once the agent captured this share of the stream; 0: no kill
	delay  time.Duration // spoolCollKillResend
}

// String writes the step as in the cell's log: C+ C- A+ A- for starts
// and kills of collector and agent, S<stream>(<count>@<rate>/s) for a
// stream, with ",C-@<share>" when the collector is killed part way.
func (s spoolStep) String() string {
	switch s.do {
	case spoolCollStart:
		return "C+"
	case spoolCollKill:
		return "C-"
	case spoolAgentStart:
		return "A+"
	case spoolAgentKill:
		return "A-"
	case spoolCollKillResend:
		return fmt.Sprintf("C-(resend+%v)", s.delay)
	}
	if s.killAt > 0 {
		return fmt.Sprintf("S%d(%d@%d/s,C-@%.2f)", s.stream, s.count, s.rate, s.killAt)
	}
	return fmt.Sprintf("S%d(%d@%d/s)", s.stream, s.count, s.rate)
}

// spoolPlan draws a spool cell's events: 3-5 streams of 300-3000
// packets at 2000-4000 packets/s, each sent while the agent captures.
// Before a stream a running collector is killed (1 in 4) or a killed
// one started (1 in 2); during a stream a running collector is killed
// once the agent captured a random share of it (1 in 3). After a
// stream the agent is killed (1 in 3) and restarted on its spool; while
// it is down a running collector is killed (1 in 4), then a killed one
// started before the agent (1 in 2); a collector running when the agent
// restarts is killed 0-20 ms after the agent connected, while it
// resends what its spool holds (1 in 2). One stream, chosen at random,
// is sent with the collector down and the agent killed after it before
// the collector returns: then only the spool holds that stream. The
// collector runs at the end.
func spoolPlan(rng *rand.Rand) []spoolStep {
	n := 3 + rng.IntN(3)
	spooled := rng.IntN(n)
	up := true
	plan := []spoolStep{{do: spoolCollStart}, {do: spoolAgentStart}}
	add := func(s spoolStep) { plan = append(plan, s) }
	for i := range n {
		switch {
		case up && (i == spooled || rng.IntN(4) == 0):
			add(spoolStep{do: spoolCollKill})
			up = false
		case !up && i != spooled && rng.IntN(2) == 0:
			add(spoolStep{do: spoolCollStart})
			up = true
		}
		send := spoolStep{do: spoolSend, stream: uint32(i + 1), count: 300 + rng.IntN(2701), rate: 2000 + 500*rng.IntN(5)}
		if up && rng.IntN(3) == 0 {
			send.killAt = 0.05 + 0.9*rng.Float64()
			up = false
		}
		add(send)
		if i != spooled && rng.IntN(3) != 0 {
			continue
		}
		add(spoolStep{do: spoolAgentKill})
		if up && rng.IntN(4) == 0 {
			add(spoolStep{do: spoolCollKill})
			up = false
		}
		if !up && rng.IntN(2) == 0 {
			add(spoolStep{do: spoolCollStart})
			up = true
		}
		add(spoolStep{do: spoolAgentStart})
		if up && rng.IntN(2) == 0 {
			add(spoolStep{do: spoolCollKillResend, delay: time.Duration(rng.IntN(21)) * time.Millisecond})
			up = false
		}
	}
	if !up {
		add(spoolStep{do: spoolCollStart})
	}
	return plan
}

// runSpoolCell runs a live spool cell of TestCrashMatrix. An agent with
// --spool, the cell's --compress and --flush-interval spoolFlush
// captures on a veth end (namespace A, with the collector, which
// writes with the cell's --file-compress); gen udp sends the streams
// from namespace B. The steps of spoolPlan run in order: the collector
// is killed at any moment, the agent only once all it captured is
// sealed into batches (pcapsync_agent_sealed_packets_total: an agent
// crash loses the batch being built, docs/reliability.md). Kill moments within a stream are shares of
// the stream the agent captured (its metrics), so they repeat with the
// seed; a kill while the agent resends its spool is a seeded delay
// after it connected. At the end the agent, once connected with
// nothing unacknowledged, and the collector stop cleanly (SIGTERM,
// exit 0), and every packet of every stream must be in the files
// exactly once, each file read whole by pcapfile.Reader, tshark and
// capinfos, no collector run logging missing batches or LOST.
func runSpoolCell(t *testing.T, seed uint64, c crashCell) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), crashCellTimeout)
	t.Cleanup(cancel)
	rng := rand.New(rand.NewPCG(seed, uint64(c.index)))
	plan := spoolPlan(rng)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("cell %s, seed %d: %s", c, seed, fmt.Sprintf(format, args...))
	}

	vn := newVethNet(t)
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, spoolPort))
	const name = "spooled"
	dir, spool := t.TempDir(), filepath.Join(t.TempDir(), "spool")
	addr := freeport.Addr(t)
	metricsAddr := freeport.Addr(t)
	scrape := newNetnsScraper(t, vn.A)
	t.Logf("cell %s, seed %d: plan %v", c, seed, plan)

	var (
		coll, agent                 *proc // nil while down
		colls                       []*proc
		agentRuns                   int
		sentRun                     int // packets sent during the agent's current run
		want                        = map[uint32]uint64{}
		collKills, collKillsHolding int // collector kills; of them, while the agent held unacknowledged batches
		agentKills, agentKillsHeld  int // agent kills; of them, holding unacknowledged batches
		resendKills                 int // collector kills while a restarted agent resent its spool's batches
	)
	captured := func() int {
		return int(scrape.metrics(metricsAddr).Value(t, "pcapsync_agent_captured_packets_total", "interface=vA"))
	}
	unacked := func() int {
		return int(scrape.metrics(metricsAddr).Value(t, "pcapsync_agent_unacknowledged_batches"))
	}
	// waitCaptured waits until the agent's run captured n packets.
	waitCaptured := func(n int) {
		t.Helper()
		if err := testutil.Poll(spoolWait, func() error {
			got := captured()
			if got >= n {
				return nil
			}
			err := fmt.Errorf("%s captured %d packets, want %d", agent.name, got, n)
			if agent.exited() {
				err = fmt.Errorf("%w (exited): %w", err, testutil.ErrGiveUp)
			}
			return err
		}); err != nil {
			fail("%v", err)
		}
	}
	startColl := func() {
		t.Helper()
		args := append([]string{"collector", "--listen", addr, "--dir", dir}, withMetrics(t, c.collectorFlags())...)
		coll = startProc(t, ctx, fmt.Sprintf("collector run %d", len(colls)+1), vn.A, args...)
		colls = append(colls, coll)
		if err := coll.awaitReady(crashListen); err != nil {
			fail("collector start %d: %v", len(colls), err)
		}
	}
	// killColl kills the collector; it reports whether the agent held
	// unacknowledged batches just before.
	killColl := func() (held bool) {
		t.Helper()
		if held = agent != nil && unacked() > 0; held {
			collKillsHolding++
		}
		coll.signal(syscall.SIGKILL)
		if code := coll.wait(10 * time.Second); code != -1 {
			fail("%s exited with code %d before it was killed", coll.name, code)
		}
		coll = nil
		collKills++
		return held
	}
	startAgent := func() {
		t.Helper()
		agentRuns++
		agent = startProc(t, ctx, fmt.Sprintf("agent run %d", agentRuns), vn.A, "agent", "--collector", addr,
			"--name", name, "--iface", "vA", "--filter", fmt.Sprintf("udp and dst port %d", spoolPort),
			"--spool", spool, "--compress", c.wire, "--flush-interval", spoolFlush.String(), "--metrics", metricsAddr)
		sentRun = 0
		// Its capture is open once it serves metrics: from then on it
		// sees every packet sent.
		if err := agent.awaitReady(spoolWait); err != nil {
			fail("%v", err)
		}
	}
	killAgent := func() {
		t.Helper()
		waitCaptured(sentRun)
		// Every packet this run captured is in a batch, sealed (the
		// last one a flush interval after its first packet).
		if err := agent.awaitMetric(spoolWait, float64(sentRun), "pcapsync_agent_sealed_packets_total"); err != nil {
			fail("%v", err)
		}
		if unacked() > 0 {
			agentKillsHeld++
		}
		agent.signal(syscall.SIGKILL)
		if code := agent.wait(10 * time.Second); code != -1 {
			fail("%s exited with code %d before it was killed", agent.name, code)
		}
		agent = nil
		agentKills++
	}
	send := func(s spoolStep) {
		t.Helper()
		g := startProc(t, ctx, fmt.Sprintf("gen stream %d", s.stream), vn.B, "gen", "udp",
			"--to", netip.AddrPortFrom(vn.addrA, spoolPort).String(), "--count", fmt.Sprint(s.count),
			"--rate", fmt.Sprint(s.rate), "--stream", fmt.Sprint(s.stream))
		if s.killAt > 0 {
			waitCaptured(sentRun + max(1, int(s.killAt*float64(s.count))))
			killColl()
		}
		if code := g.wait(spoolWait); code != 0 {
			fail("%s exited with code %d", g.name, code)
		}
		if w := fmt.Sprintf("sent %d datagrams", s.count); !strings.Contains(g.stdout.String(), w) {
			fail("%s: stdout %q, want %q", g.name, g.stdout.String(), w)
		}
		sentRun += s.count
		want[s.stream] = uint64(s.count)
	}

	for _, s := range plan {
		switch s.do {
		case spoolCollStart:
			startColl()
		case spoolCollKill:
			killColl()
		case spoolAgentStart:
			startAgent()
		case spoolAgentKill:
			killAgent()
		case spoolSend:
			send(s)
		case spoolCollKillResend:
			if err := agent.awaitMetric(spoolWait, 1, "pcapsync_agent_connected"); err != nil {
				fail("%v", err)
			}
			resent := strings.Contains(agent.stderr.String(), "spool: resending batches of the previous run")
			time.Sleep(s.delay) // the seeded moment of the kill, not a wait for an event
			if killColl() && resent {
				resendKills++
			}
		}
	}

	// The agent reconnects (after its backoff) and has everything
	// acknowledged; then both stop cleanly.
	var connected, pending, got float64
	testutil.Eventually(t, spoolSettle, func() error {
		m := scrape.metrics(metricsAddr)
		connected = m.Value(t, "pcapsync_agent_connected")
		pending = m.Value(t, "pcapsync_agent_unacknowledged_batches")
		got = m.Value(t, "pcapsync_agent_captured_packets_total", "interface=vA")
		if connected == 1 && pending == 0 && int(got) == sentRun {
			return nil
		}
		return fmt.Errorf("cell %s, seed %d: %s: connected %v, unacknowledged batches %v, captured %v of %d; want connected, 0, all",
			c, seed, agent.name, connected, pending, got, sentRun)
	})
	ran := time.Since(began)
	agent.stop(20 * time.Second)
	if s := agent.summary(); s.Read != uint64(sentRun) || s.Dropped != 0 || s.KernelDrops != 0 || s.Unacked != 0 {
		t.Errorf("cell %s, seed %d: %s summary %+v: want %d read, nothing dropped or unacknowledged", c, seed, agent.name, s, sentRun)
	}
	coll.stop(20 * time.Second)
	sum := coll.collectorSummary() // fails the test on LOST
	for _, p := range colls {
		if strings.Contains(p.stderr.String(), "batches missing") {
			t.Errorf("cell %s, seed %d: %s logged batches missing from the agent's sequence", c, seed, p.name)
		}
	}

	if got := agentDirs(t, dir); !slices.Equal(got, []string{name}) {
		t.Errorf("cell %s, seed %d: collector dir holds %q, want only [%s]", c, seed, got, name)
	}
	r := checkAgentDir(t, filepath.Join(dir, name))
	r.expectExactlyOnce(t, fmt.Sprintf("cell %s, seed %d", c, seed), want)
	if r.Cut != 0 {
		t.Errorf("cell %s, seed %d: %d packets cut short", c, seed, r.Cut)
	}
	if collKills == 0 || agentKillsHeld == 0 {
		t.Errorf("cell %s, seed %d: %d collector kills, %d agent kills holding unacknowledged batches: want at least one of each (the plan %v)",
			c, seed, collKills, agentKillsHeld, plan)
	}
	lost, dup, unexpected := r.tally(want)
	var total uint64
	for _, n := range want {
		total += n
	}
	repaired, cut, removed := repairCounts(colls)
	t.Logf("CRASHCELL %s: %v (run %v, check %v), %d streams, %d packets, collector kills %d (%d while the agent held unacknowledged batches, %d of them while it resent its spool), "+
		"agent kills %d (%d holding unacknowledged batches), files %d, repaired %d (%d cut back), removed %d, collector duplicates dropped %d; lost %d, dup %d, unexpected %d",
		c, time.Since(began).Round(100*time.Millisecond), ran.Round(100*time.Millisecond), (time.Since(began) - ran).Round(100*time.Millisecond),
		len(want), total, collKills, collKillsHolding, resendKills, agentKills, agentKillsHeld, len(r.Files), repaired, cut, removed,
		sum.Duplicates, lost, dup, unexpected)
}
