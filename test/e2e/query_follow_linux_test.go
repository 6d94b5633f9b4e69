//go:build linux

package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/testutil/freeport"
)

// followed parses the pcapng a following query has written so far (b
// may end inside a block) and returns the sequence numbers of stream's
// packets in output order.
func followed(b []byte, stream uint32) []uint64 {
	r, err := pcapfile.NewReader(bytes.NewReader(b), nil)
	if err != nil {
		return nil
	}
	var seqs []uint64
	var p pcapfile.Packet
	for r.ReadInto(&p) == nil {
		if s, seq, ok, err := gen.Parse(p.Data, r.Interfaces()[p.Interface].LinkType); err == nil && ok && s == stream {
			seqs = append(seqs, seq)
		}
	}
	return seqs
}

// TestQueryFollow: `pcapsync query --follow -w -`, started before a
// live agent sends, writes the packets to its pipe while they are being
// sent (not only at the end), and, once --until has passed, exits 0
// with every packet the agent captured in the range exactly once and in
// timestamp order: the same packets a query of the range run afterwards
// returns.
func TestQueryFollow(t *testing.T) {
	requireTools(t, checkTools...)
	vn := newVethNet(t)
	ctx := testContext(t)
	const port, stream, count, rate = 5557, 9, 3000, 1000
	udpSink(t, vn.A, netip.AddrPortFrom(vn.addrA, port))
	dir := t.TempDir()
	addr := freeport.Addr(t)
	coll := startCollector(t, ctx, vn.A, addr, dir)
	ag := startProc(t, ctx, "agent", vn.A, "agent", "--collector", addr, "--name", "live1", "--iface", "vA",
		"--filter", fmt.Sprintf("udp and dst port %d", port))
	coll.waitSessions(1, 15*time.Second)

	since := time.Now()
	until := since.Add(4 * time.Second) // the stream takes 3 s
	q := startProc(t, ctx, "query --follow", "", "query", "--dir", dir, "--follow", "--follow-delay", "500ms",
		"--since", epoch(since.UnixNano()), "--until", epoch(until.UnixNano()), "-w", "-")
	g := startProc(t, ctx, "gen", vn.B, "gen", "udp", "--to", fmt.Sprintf("%s:%d", vn.addrA, port),
		"--count", fmt.Sprint(count), "--rate", fmt.Sprint(rate), "--stream", fmt.Sprint(stream))
	// While the generator still sends, packets are already in the pipe.
	testutil.EventuallyTrue(t, 10*time.Second, "packets in the follow's output while the stream is sent", func() bool {
		return len(followed([]byte(q.stdout.String()), stream)) >= count/10
	})
	if g.exited() {
		t.Fatal("the generator had finished before the followed output showed its packets")
	}
	if code := g.wait(20 * time.Second); code != 0 {
		t.Fatalf("generator exited with %d", code)
	}
	if code := q.wait(20 * time.Second); code != 0 {
		t.Fatalf("query --follow exited with %d\n%s", code, q.stderr.String())
	}
	ag.stop(20 * time.Second)
	coll.stop(20 * time.Second)
	s := ag.summary()
	if s.Read != count || s.Dropped != 0 || s.KernelDrops != 0 {
		t.Fatalf("agent summary %+v: want %d read, none dropped", s, count)
	}

	out := []byte(q.stdout.String())
	got := followed(out, stream)
	if len(got) != count {
		t.Errorf("followed %d packets of the stream, want %d", len(got), count)
	}
	seen := map[uint64]bool{}
	for _, seq := range got {
		if seen[seq] {
			t.Errorf("packet %d written twice", seq)
		}
		seen[seq] = true
	}
	// In timestamp order, and the packets of the range a later query
	// returns.
	r, err := pcapfile.NewReader(bytes.NewReader(out), nil)
	if err != nil {
		t.Fatal(err)
	}
	var last int64
	var p pcapfile.Packet
	for {
		err := r.ReadInto(&p)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if p.Timestamp < last {
			t.Fatalf("packet at %d after one at %d", p.Timestamp, last)
		}
		last = p.Timestamp
	}
	after := filepath.Join(t.TempDir(), "after.pcapng")
	q2 := startProc(t, ctx, "query", "", "query", "--dir", dir, "--since", epoch(since.UnixNano()), "--until", epoch(until.UnixNano()), "-w", after)
	if code := q2.wait(20 * time.Second); code != 0 {
		t.Fatalf("query exited with %d", code)
	}
	want := readQPkts(t, after)
	followedPath := filepath.Join(t.TempDir(), "followed.pcapng")
	if err := os.WriteFile(followedPath, out, 0o600); err != nil {
		t.Fatal(err)
	}
	compareQuery(t, readQPkts(t, followedPath), want)
}
