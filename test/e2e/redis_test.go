//go:build linux

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/redisfeed"
	"github.com/pcapsync/pcapsync/internal/redisfeed/redistest"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// redis returns the Redis feed's part of the collector's summary,
// failing the test without one.
func (s collectorSummary) redis(t *testing.T) redisfeed.Summary {
	t.Helper()
	if s.Redis == nil {
		t.Fatalf("the collector's summary has no Redis feed: %+v", s)
	}
	return *s.Redis
}

// namedPacket is a packet with the name of its interface.
type namedPacket struct {
	pcapfile.Packet
	Iface string
}

func (p namedPacket) String() string {
	return fmt.Sprintf("%s ts %d orig %d len %d", p.Iface, p.Timestamp, p.OrigLen, len(p.Data))
}

// readNamed reads every packet of a pcapng stream.
func readNamed(t *testing.T, what string, r io.Reader) []namedPacket {
	t.Helper()
	rd, err := pcapfile.NewReader(r, nil)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var pkts []namedPacket
	for {
		p, err := rd.ReadPacket()
		if err == io.EOF {
			return pkts
		}
		if err != nil {
			t.Fatalf("%s: after %d packets: %v", what, len(pkts), err)
		}
		pkts = append(pkts, namedPacket{p, rd.Interfaces()[p.Interface].Name})
	}
}

// agentPackets reads every file of an agent's directory, in order.
func agentPackets(t *testing.T, dir string) []namedPacket {
	t.Helper()
	var all []namedPacket
	for _, name := range dirEntries(t, dir) {
		f, err := pcapfile.Open(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, readNamed(t, name, f)...)
		f.Close()
	}
	return all
}

// tailRedis runs "pcapsync tail --redis" for agent from 10 minutes back
// until the stream is idle, and returns the packets it wrote.
func tailRedis(t *testing.T, url, agent string, extra ...string) []namedPacket {
	t.Helper()
	args := append([]string{"tail", "--redis", url, "--agent", agent, "--from", "10m", "--until-idle", "1s"}, extra...)
	p := startProc(t, testContext(t), "tail "+agent, "", args...)
	if code := p.wait(30 * time.Second); code != 0 {
		t.Fatalf("tail %s exited with code %d: %s", agent, code, p.stderr.String())
	}
	return readNamed(t, "tail "+agent, strings.NewReader(p.stdout.String()))
}

// samePackets reports the first difference between two packet lists.
func samePackets(t *testing.T, what string, got, want []namedPacket) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d packets, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		g, w := got[i], want[i]
		if g.Iface != w.Iface || g.Timestamp != w.Timestamp || g.OrigLen != w.OrigLen || !bytes.Equal(g.Data, w.Data) {
			t.Errorf("%s: packet %d is %v, want %v", what, i, g, w)
			return
		}
	}
}

// redisRig is a redis-server and a collector publishing to it.
type redisRig struct {
	srv      *redistest.Server
	ctx      context.Context
	tmp, dir string // scratch; the collector's output
	addr     string // the collector's
	coll     *proc
}

// newRedisRig starts a redis-server and a collector with --redis and
// the extra flags.
func newRedisRig(t *testing.T, extra ...string) *redisRig {
	t.Helper()
	requireTools(t, checkTools...)
	rg := &redisRig{srv: redistest.Start(t), ctx: testContext(t), tmp: t.TempDir(), dir: t.TempDir()}
	rg.addr = freeport.Addr(t)
	rg.coll = startCollector(t, rg.ctx, "", rg.addr, rg.dir, append([]string{"--redis", rg.srv.URL()}, extra...)...)
	return rg
}

// TestRedisTail: two agents stream into a collector with --redis for
// about two seconds; afterwards "tail --redis --from 10m" of each agent
// writes exactly the packets of the agent's file, in the same order,
// timestamps, lengths, bytes and interface names alike.
func TestRedisTail(t *testing.T) {
	rg := newRedisRig(t, "--redis-compress", "zstd")
	srv, ctx, tmp, dir, addr, coll := rg.srv, rg.ctx, rg.tmp, rg.dir, rg.addr, rg.coll
	agents := []struct {
		name   string
		stream uint32
	}{{"redis-a", 31}, {"redis-b", 32}}
	const count = 3000
	var ins []*pacedInput
	var procs []*proc
	for i, a := range agents {
		src := filepath.Join(tmp, a.name+".pcap")
		writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: a.stream, Nanosecond: true, Seed: uint64(i + 5)})
		in := startPacedInput(t, ctx, src, filepath.Join(tmp, a.name+".fifo"), 2*time.Second)
		ins = append(ins, in)
		// One agent compresses its batches on the wire too: the race
		// detector once caught a compress buffer reused under a write
		// in exactly this set-up (fixed: queue.beginWrite).
		extra := []string{"--batch-size", "16K"}
		if i == 0 {
			extra = append(extra, "--compress", "s2")
		}
		procs = append(procs, startReplay(t, ctx, addr, a.name, in.path, extra...))
	}
	for i, in := range ins {
		in.finish(t)
		finishReplay(t, procs[i], count, 30*time.Second)
	}
	coll.stop(15 * time.Second)
	cs := coll.collectorSummary()
	rs := cs.redis(t)
	if rs.Published != cs.Batches || rs.Dropped != 0 || rs.Reconnects != 0 {
		t.Errorf("redis feed %+v, collector wrote %d batches: want all published, none dropped", rs, cs.Batches)
	}
	if cs.Batches < 20 {
		t.Errorf("only %d batches: the run did not stream", cs.Batches)
	}
	for _, a := range agents {
		r := checkAgentDir(t, filepath.Join(dir, a.name))
		r.expectExactlyOnce(t, a.name, map[uint32]uint64{a.stream: count})
		want := agentPackets(t, filepath.Join(dir, a.name))
		samePackets(t, "tail "+a.name, tailRedis(t, srv.URL(), a.name), want)
	}
	// --iface and --filter select: the generated traffic is UDP only.
	if n := len(tailRedis(t, srv.URL(), "redis-a", "--iface", "no-such-if")); n != 0 {
		t.Errorf("tail --iface no-such-if wrote %d packets", n)
	}
	if n := len(tailRedis(t, srv.URL(), "redis-a", "--filter", "tcp")); n != 0 {
		t.Errorf("tail --filter tcp wrote %d packets of UDP-only traffic", n)
	}
	if n := len(tailRedis(t, srv.URL(), "redis-a", "--filter", "udp", "--count", "100")); n != 100 {
		t.Errorf("tail --filter udp --count 100 wrote %d packets", n)
	}
}

// TestRedisDown: Redis killed in the middle of a run costs the files
// nothing; the feed drops and counts while it is away, and publishes
// again once it is back on the same port.
func TestRedisDown(t *testing.T) {
	// redisOutage is how long Redis stays down: a deliberate duration,
	// the subject of the test (a fifth of the paced input arrives
	// meanwhile), not a wait for something to happen.
	const redisOutage = 800 * time.Millisecond
	rg := newRedisRig(t, "--redis-timeout", "300ms")
	srv, ctx, tmp, dir, addr, coll := rg.srv, rg.ctx, rg.tmp, rg.dir, rg.addr, rg.coll
	const name, stream, count = "redis-down", 33, 6000
	src := filepath.Join(tmp, "in.pcap")
	writeGenFile(t, src, gen.FileConfig{Count: count, Mix: gen.MixIMIX, Stream: stream, Seed: 9})
	in := startPacedInput(t, ctx, src, filepath.Join(tmp, "in.fifo"), 4*time.Second)
	agent := startReplay(t, ctx, addr, name, in.path, "--batch-size", "16K")
	// Some batches are published before the outage.
	key := redisfeed.Key(redisfeed.DefaultPrefix, name)
	testutil.Eventually(t, 10*time.Second, func() error {
		out, err := exec.Command("redis-cli", "-u", srv.URL(), "XLEN", key).Output()
		if n, _ := strconv.Atoi(strings.TrimSpace(string(out))); err != nil || n < 20 {
			return fmt.Errorf("redis stream %s holds %q entries, want 20 (%v)", key, out, err)
		}
		return nil
	})
	srv.Kill()
	coll.waitMetric(10*time.Second, 1, "pcapsync_redis_batches_dropped_total") // the feed found it gone
	time.Sleep(redisOutage)
	srv.Restart() // empty: what was published before is gone with it
	coll.waitMetric(10*time.Second, 1, "pcapsync_redis_reconnects_total")
	in.finish(t)
	finishReplay(t, agent, count, 30*time.Second)
	coll.stop(15 * time.Second)
	cs := coll.collectorSummary()
	rs := cs.redis(t)
	r := checkAgentDir(t, filepath.Join(dir, name))
	r.expectExactlyOnce(t, name, map[uint32]uint64{stream: count})
	if rs.Dropped == 0 || rs.Reconnects != 1 || rs.Published == 0 || rs.Published+rs.Dropped != cs.Batches {
		t.Errorf("redis feed %+v of %d batches written: want some dropped, 1 reconnect, published + dropped = written", rs, cs.Batches)
	}
	// What the restarted Redis holds is what was published after the
	// restart: the file's last packets, in order.
	got := tailRedis(t, srv.URL(), name)
	want := agentPackets(t, filepath.Join(dir, name))
	if len(got) == 0 || len(got) >= len(want) {
		t.Fatalf("after the restart the stream holds %d packets of %d written", len(got), len(want))
	}
	samePackets(t, "tail after restart", got, want[len(want)-len(got):])
	t.Logf("redis feed %+v; %d of %d packets in the restarted Redis", rs, len(got), len(want))
}
