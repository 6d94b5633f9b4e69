package query

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// liveStore is a store written to while a query follows it.
type liveStore struct {
	t    *testing.T
	dir  string
	st   *store.Store
	ags  map[string]*liveAgent
	refs []ref
}

type liveAgent struct {
	w     *store.Writer
	inst  *store.Instance
	ifmap []int
	rank  int
	seq   int
	batch uint64
}

func newLiveStore(t *testing.T, comp string, rotate int64) *liveStore {
	t.Helper()
	var spec compress.Spec
	if comp != "" {
		var err error
		if spec, err = compress.ParseSpec(comp); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	st, err := store.Open(store.Config{Dir: dir, FileCompress: spec, RotateSize: rotate, RotateInterval: -1, Fsync: store.FsyncNever})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st.Close(ctx)
	})
	return &liveStore{t: t, dir: dir, st: st, ags: map[string]*liveAgent{}}
}

// agent returns the agent name's writer, starting it (rank orders the
// expected ties: give agents ranks in name order).
func (l *liveStore) agent(name string, rank int) *liveAgent {
	l.t.Helper()
	if a, ok := l.ags[name]; ok {
		return a
	}
	w, err := l.st.Writer(name)
	if err != nil {
		l.t.Fatal(err)
	}
	a := &liveAgent{w: w, inst: l.st.Instance([16]byte{byte(rank + 1)}, name), rank: rank}
	w.Start("h1")
	for _, n := range []string{"eth0", "eth1"} {
		i, err := w.AddInterface(wire.Interface{Name: n, LinkType: 1, SnapLen: 65535})
		if err != nil {
			l.t.Fatal(err)
		}
		a.ifmap = append(a.ifmap, i)
	}
	l.ags[name] = a
	return a
}

// write writes one batch of agent name: n packets on iface from Unix
// ns ts0 on, 1 µs apart, of size bytes each (0: small); commit ends it
// as acknowledged.
func (l *liveStore) write(name string, rank int, ts0 int64, n, iface, size int, commit bool) {
	l.t.Helper()
	a := l.agent(name, rank)
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		data := frame(name, a.seq, 53)
		for len(data) < size { // incompressible
			data = append(data, byte(rand.Uint32()))
		}
		ts := ts0 + int64(i)*1000
		orig := uint32(len(data))
		e.Append(ts, uint32(iface), orig, data)
		l.refs = append(l.refs, ref{TS: ts, Iface: fmt.Sprintf("%s:eth%d", name, iface), Orig: orig, Data: data,
			rank: a.rank, seq: a.seq, agent: name})
		a.seq++
	}
	a.batch++
	b, err := wire.ParseBatch(0, e.Finish(a.batch)[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
	if err != nil {
		l.t.Fatal(err)
	}
	if _, err := a.w.WriteBatch(&b, a.ifmap, a.inst); err != nil {
		l.t.Fatal(err)
	}
	if commit {
		if err := a.w.Commit(); err != nil {
			l.t.Fatal(err)
		}
	}
}

// expectAbs is expect for refs with absolute timestamps in [since,
// until).
func expectAbs(refs []ref, since, until int64) []got {
	var sel []ref
	for _, r := range refs {
		if r.TS >= since && r.TS < until {
			sel = append(sel, r)
		}
	}
	return expect(sel, math.MinInt64/2, math.MaxInt64/2, nil)
}

// followRun runs cfg in the background into a buffer.
type followRun struct {
	out  testutil.Buffer
	done chan struct{}
	res  Result
	err  error
}

func startFollow(t *testing.T, ctx context.Context, cfg Config) *followRun {
	t.Helper()
	r := &followRun{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.res, r.err = Run(ctx, cfg, &r.out)
	}()
	t.Cleanup(func() {
		select {
		case <-r.done:
		case <-time.After(20 * time.Second):
			t.Error("query still running at the end of the test")
		}
	})
	return r
}

// wait waits for Run to return.
func (r *followRun) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		t.Fatalf("follow did not end within %s", timeout)
	}
}

// packets parses what the query wrote so far (whole blocks: it flushes
// at block ends), leniently: a partial output is not an error.
func (r *followRun) packets() ([]got, error) {
	b := []byte(r.out.String())
	if len(b) == 0 {
		return nil, nil
	}
	pr, err := pcapfile.NewReader(bytes.NewReader(b), nil)
	if err != nil {
		return nil, err
	}
	var out []got
	for {
		var p pcapfile.Packet
		err := pr.ReadInto(&p)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, got{p.Timestamp, pr.Interfaces()[p.Interface].Name, p.OrigLen, bytes.Clone(p.Data)})
	}
}

// waitPackets waits until the output holds at least n packets.
func (r *followRun) waitPackets(t *testing.T, n int) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, func() error {
		select {
		case <-r.done:
			return fmt.Errorf("%w: query ended: %v", testutil.ErrGiveUp, r.err)
		default:
		}
		p, err := r.packets()
		if err != nil {
			return err
		}
		if len(p) < n {
			return fmt.Errorf("%d of %d packets out", len(p), n)
		}
		return nil
	})
}

// TestFollow: packets written after the query started come out, in
// order, exactly once: across rotations (one file per batch), with a
// second agent appearing later whose batches interleave in time with the
// first's, for every file compression; the follow ends once every
// agent's packets are past --until by the delay.
func TestFollow(t *testing.T) {
	for _, comp := range []string{"", "gzip", "zstd"} {
		t.Run("comp="+comp, func(t *testing.T) {
			l := newLiveStore(t, comp, 4096)
			t0 := time.Now().UnixNano()
			ms := int64(time.Millisecond)
			until := t0 + 3600*int64(time.Second)
			delay := time.Second
			l.write("a1", 0, t0, 5, 0, 0, true)
			l.write("a1", 0, t0+10*ms, 5, 1, 0, true)
			r := startFollow(t, context.Background(), Config{Dir: l.dir, Agents: []string{"a*"}, Until: time.Unix(0, until),
				Follow: true, FollowDelay: delay, FollowPoll: 10 * time.Millisecond})
			r.waitPackets(t, 10) // what was there: released once a1 is silent for the delay

			for i := range 4 { // one file each
				l.write("a1", 0, t0+int64(100+10*i)*ms, 20, i%2, 300, true)
			}
			r.waitPackets(t, 90)

			// a2 appears; its batches and a1's interleave in time, and
			// each agent's two interfaces too.
			for range 6 {
				at := time.Now().UnixNano() // as a live capture's
				l.write("a2", 1, at, 10, 0, 0, true)
				l.write("a1", 0, at+ms, 10, 1, 0, true)
				l.write("a2", 1, at+2*ms, 10, 1, 0, true)
				l.write("a1", 0, at-ms, 10, 0, 0, true)
			}
			r.waitPackets(t, 90+240) // once both are silent for the delay
			// Past --until by more than the delay: both streams end.
			l.write("a1", 0, until+int64(2*delay), 3, 0, 0, true)
			l.write("a2", 1, until+int64(2*delay), 3, 0, 0, true)
			r.wait(t, 15*time.Second)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.res.Late != 0 || r.res.Agents != 2 || r.res.Stopped != "" {
				t.Errorf("result %+v: want no late packet, 2 agents, not stopped", r.res)
			}
			got, ifaces, _ := readOutput(t, []byte(r.out.String()))
			comparePackets(t, got, expectAbs(l.refs, 0, until))
			if len(ifaces) != 4 {
				t.Errorf("%d interfaces, want 4", len(ifaces))
			}
			checkTshark(t, []byte(r.out.String()), len(got))
		})
	}
}

// checkTshark checks that tshark reads out whole, with n packets.
func checkTshark(t *testing.T, out []byte, n int) {
	t.Helper()
	if _, err := exec.LookPath("tshark"); err != nil {
		t.Log("no tshark: not checked with it")
		return
	}
	f := filepath.Join(t.TempDir(), "out.pcapng")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command("tshark", "-r", f, "-T", "fields", "-e", "frame.number")
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark: %v: %s", err, stderr.Bytes())
	}
	if lines := bytes.Count(b, []byte("\n")); lines != n {
		t.Fatalf("tshark read %d packets, want %d: %s", lines, n, b)
	}
}

// TestFollowUntilClock: with nothing written past --until, the follow
// ends once the clock is the delay past it, with the packets before it.
func TestFollowUntilClock(t *testing.T) {
	l := newLiveStore(t, "", 0)
	now := time.Now()
	until := now.Add(700 * time.Millisecond)
	l.write("a1", 0, now.UnixNano(), 5, 0, 0, true)
	r := startFollow(t, context.Background(), Config{Dir: l.dir, Until: until,
		Follow: true, FollowDelay: 200 * time.Millisecond, FollowPoll: 10 * time.Millisecond})
	r.wait(t, 15*time.Second)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if time.Now().Before(until) {
		t.Fatalf("ended before --until")
	}
	got, _, _ := readOutput(t, []byte(r.out.String()))
	comparePackets(t, got, expectAbs(l.refs, 0, until.UnixNano()))
}

// TestFollowCancel: ending the context ends the follow without error,
// every packet read (held for the order or not) written in order, the
// output a whole pcapng.
func TestFollowCancel(t *testing.T) {
	for _, comp := range []string{"", "zstd"} {
		t.Run("comp="+comp, func(t *testing.T) {
			l := newLiveStore(t, comp, 0)
			t0 := time.Now().UnixNano()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := startFollow(t, ctx, Config{Dir: l.dir, Follow: true, FollowDelay: 300 * time.Millisecond, FollowPoll: 10 * time.Millisecond})
			l.write("a1", 0, t0, 5, 0, 0, true)
			r.waitPackets(t, 5)
			for i := range 20 {
				l.write("a1", 0, t0+int64(i+1)*int64(time.Millisecond), 5, i%2, 0, true)
			}
			cancel()
			r.wait(t, 15*time.Second)
			if r.err != nil || r.res.Stopped != "interrupted" {
				t.Fatalf("err %v, stopped %q: want nil, interrupted", r.err, r.res.Stopped)
			}
			got, _, _ := readOutput(t, []byte(r.out.String()))
			want := expectAbs(l.refs, 0, maxTS)
			if len(got) < 5 {
				t.Fatalf("%d packets", len(got))
			}
			comparePackets(t, got, want[:len(got)])
			checkTshark(t, []byte(r.out.String()), len(got))
		})
	}
}

// TestFollowTornBatch: a batch written but not acknowledged (the
// store's buffer already put part of it in the file) never comes out,
// for every compression; the acknowledged ones do.
func TestFollowTornBatch(t *testing.T) {
	for _, comp := range []string{"", "gzip", "zstd"} {
		t.Run("comp="+comp, func(t *testing.T) {
			l := newLiveStore(t, comp, 0)
			now := time.Now()
			t0 := now.UnixNano()
			l.write("a1", 0, t0, 10, 0, 1400, true)
			part := partOf(t, l.dir, "a1")
			before := size(t, part)
			// 2 MiB: more than the store's 1 MiB buffer. A compressed
			// file is written by its compressor's goroutine: it gets
			// there a little later.
			l.write("a1", 0, t0+int64(time.Millisecond), 1500, 1, 1400, false)
			testutil.Eventually(t, 10*time.Second, func() error {
				if after := size(t, part); after <= before {
					return fmt.Errorf("the unacknowledged batch is not in the file yet (%d bytes, %d before)", after, before)
				}
				return nil
			})
			r := startFollow(t, context.Background(), Config{Dir: l.dir, Until: now.Add(500 * time.Millisecond),
				Follow: true, FollowDelay: 100 * time.Millisecond, FollowPoll: 10 * time.Millisecond})
			r.wait(t, 15*time.Second)
			if r.err != nil {
				t.Fatal(r.err)
			}
			got, _, _ := readOutput(t, []byte(r.out.String()))
			comparePackets(t, got, expectAbs(l.refs[:10], 0, maxTS))
			checkTshark(t, []byte(r.out.String()), len(got))
		})
	}
}

func partOf(t *testing.T, dir, agent string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, agent, "*"+layout.PartSuffix))
	if len(m) != 1 {
		t.Fatalf("files being written: %v, want one", m)
	}
	return m[0]
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// TestFollowConfig: negative follow times are refused.
func TestFollowConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []Config{{Dir: dir, FollowDelay: -1}, {Dir: dir, FollowPoll: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if c := (Config{Dir: dir, Follow: true}); c.Validate() != nil {
		t.Error("follow with defaults refused")
	}
}
