package collector

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

func newCore(t testing.TB, cfg Config) *Core {
	t.Helper()
	if cfg.Store.Dir == "" {
		cfg.Store.Dir = t.TempDir()
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if cfg.Store.RotateInterval == 0 {
		cfg.Store.RotateInterval = -1 // a run across the top of an hour would split files
	}
	c, err := NewCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Store().Repaired() // most tests want the files repaired before they Begin
	return c
}

// The helpers shared with the store's tests.
var (
	hello        = capturetest.Hello
	batchPayload = capturetest.BatchPayload
	readDir      = capturetest.ReadDir
)

type readPacket = capturetest.Packet

func TestSessionWritesAndDropsDuplicates(t *testing.T) {
	c := newCore(t, Config{})
	s, w, err := c.begin(hello("web1", 1), Peer{}, func() {})
	if err != nil || w.LastSeq != 0 {
		t.Fatalf("Begin: %v %+v", err, w)
	}
	for seq, first := range []int{0, 10, 20} {
		if dup, err := s.batch(0, batchPayload(uint64(seq+1), first, 10)); dup || err != nil {
			t.Fatalf("batch %d: dup=%v err=%v", seq+1, dup, err)
		}
	}
	if seq, err := s.commit(); seq != 3 || err != nil {
		t.Fatalf("Commit = %d, %v; want 3", seq, err)
	}
	if dup, err := s.batch(0, batchPayload(2, 10, 10)); !dup || err != nil {
		t.Fatalf("resent batch 2: dup=%v err=%v, want a duplicate", dup, err)
	}
	s.end(true)
	pkts, files := readDir(t, filepath.Join(c.Dir(), "web1"))
	if files != 1 || len(pkts) != 30 {
		t.Fatalf("%d files, %d packets; want 1 file, 30 packets", files, len(pkts))
	}
	for i, p := range pkts {
		want := []string{"web1:eth0", "web1:tun0"}[i%2]
		if p.Iface != want || p.Data[0] != byte(i) || p.OrigLen != uint32(100+i%7) || p.TS != int64(1_700_000_000_000_000_000+i*1000) {
			t.Fatalf("packet %d: %+v", i, p)
		}
	}
	if got := c.Counters.Duplicates.Load(); got != 1 {
		t.Errorf("duplicates counter %d, want 1", got)
	}
}

func TestMalformedBatchWritesNothing(t *testing.T) {
	c := newCore(t, Config{})
	h := hello("a", 1)
	h.Interfaces = h.Interfaces[:1] // the batch uses interface 1 too
	s, _, err := c.begin(h, Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.batch(0, batchPayload(1, 0, 10)); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
	if seq, _ := s.commit(); seq != 0 {
		t.Fatalf("Commit acknowledges %d after a rejected batch", seq)
	}
	s.end(true)
	if _, err := os.Stat(filepath.Join(c.Dir(), "a")); err == nil {
		pkts, _ := readDir(t, filepath.Join(c.Dir(), "a"))
		if len(pkts) != 0 {
			t.Fatalf("%d packets of a malformed batch written", len(pkts))
		}
	}
}

func TestRejectsBadNamesBeforeAnyFile(t *testing.T) {
	c := newCore(t, Config{})
	for _, name := range []string{"", "..", "../x", "/etc", "a/b", "x\x00", ".hidden", strings.Repeat("n", 65)} {
		if _, _, err := c.begin(hello(name, 9), Peer{}, func() {}); !errors.Is(err, ErrRejected) || !errors.Is(err, wire.ErrBadName) {
			t.Errorf("%q: err = %v, want ErrRejected wrapping ErrBadName", name, err)
		}
	}
	ents, _ := os.ReadDir(c.Dir())
	for _, e := range ents {
		if e.Name() != store.ReserveFile && e.Name() != store.OwnerFile {
			t.Errorf("output dir holds %q after rejected handshakes", e.Name())
		}
	}
}

func TestRotationBySize(t *testing.T) {
	c := newCore(t, Config{Store: store.Config{RotateSize: 4096}})
	s, _, err := c.begin(hello("r", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, err := s.batch(0, batchPayload(uint64(i+1), i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	s.commit()
	s.end(true)
	pkts, files := readDir(t, filepath.Join(c.Dir(), "r"))
	if len(pkts) != 200 || files < 3 {
		t.Fatalf("%d packets in %d files, want 200 in several", len(pkts), files)
	}
	for i, p := range pkts {
		if p.Data[0] != byte(i) {
			t.Fatalf("packet %d out of order across rotation", i)
		}
	}
}

func TestTakeoverEndsOldSession(t *testing.T) {
	c := newCore(t, Config{})
	var s1 *session
	kicked := make(chan struct{})
	s1, _, err := c.begin(hello("same", 1), Peer{}, func() { close(kicked); go s1.end(false) })
	if err != nil {
		t.Fatal(err)
	}
	s1.batch(0, batchPayload(1, 0, 5))
	s1.commit()
	s2, _, err := c.begin(hello("same", 2), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-kicked:
	default:
		t.Fatal("old session not kicked")
	}
	s2.batch(0, batchPayload(1, 5, 5))
	s2.commit()
	s2.end(true)
	pkts, files := readDir(t, filepath.Join(c.Dir(), "same"))
	if len(pkts) != 10 || files != 1 {
		t.Fatalf("%d packets in %d files; the new session should continue the file", len(pkts), files)
	}
}

// TestSharedReleaseThenBegin: in a shared root, an agent given up
// (its session ended, Store.Release) and taken again by the same Core
// (a Kafka writer whose partitions were lost, then assigned back) is
// written through the store's new Writer, continuing from its marks.
func TestSharedReleaseThenBegin(t *testing.T) {
	c := newCore(t, Config{Store: store.Config{Shared: true}})
	for round, first := range []int{0, 10} {
		s, w, err := c.begin(hello("back", 1), Peer{}, func() {})
		if err != nil {
			t.Fatalf("round %d: begin: %v", round, err)
		}
		if want := uint64(round); w.LastSeq != want {
			t.Errorf("round %d: welcome at %d, want %d", round, w.LastSeq, want)
		}
		if dup, err := s.batch(0, batchPayload(uint64(round+1), first, 10)); dup || err != nil {
			t.Fatalf("round %d: batch: dup=%v err=%v", round, dup, err)
		}
		if seq, err := s.commit(); seq != uint64(round+1) || err != nil {
			t.Fatalf("round %d: commit = %d, %v", round, seq, err)
		}
		s.end(true)
		if err := c.Store().Release("back"); err != nil {
			t.Fatalf("round %d: release: %v", round, err)
		}
	}
	if pkts, _ := readDir(t, filepath.Join(c.Dir(), "back")); len(pkts) != 20 {
		t.Fatalf("%d packets in the files, want 20", len(pkts))
	}
	for _, st := range c.AgentStats() {
		if st.Name == "back" && st.Batches != 2 {
			t.Errorf("agent stats count %d batches, want 2", st.Batches)
		}
	}
}

func TestStateSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	c := newCore(t, Config{Store: store.Config{Dir: dir}})
	s, _, _ := c.begin(hello("p", 7), Peer{}, func() {})
	for i := range 3 {
		s.batch(0, batchPayload(uint64(i+1), i, 1))
	}
	s.commit()
	s.end(false)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := newCore(t, Config{Store: store.Config{Dir: dir}})
	s2, w, err := c2.begin(hello("p", 7), Peer{}, func() {})
	if err != nil || w.LastSeq != 3 {
		t.Fatalf("after restart: LastSeq %d, err %v; want 3", w.LastSeq, err)
	}
	if dup, _ := s2.batch(0, batchPayload(3, 2, 1)); !dup {
		t.Fatal("batch 3 written again after restart")
	}
	s2.end(true)
	if err := c2.Close(); err != nil {
		t.Fatal(err)
	}

	os.WriteFile(filepath.Join(dir, store.StateFile), []byte("{not json"), 0o600)
	c3 := newCore(t, Config{Store: store.Config{Dir: dir}}) // must start, not crash-loop
	if _, w, err := c3.begin(hello("p", 7), Peer{}, func() {}); err != nil || w.LastSeq != 0 {
		t.Fatalf("damaged state loaded: LastSeq %d (%v), want 0", w.LastSeq, err)
	}
	if _, err := os.Stat(filepath.Join(dir, store.StateFile+".damaged")); err != nil {
		t.Fatalf("damaged state not moved aside: %v", err)
	}
}

func TestServerRoundTrip(t *testing.T) {
	c := newCore(t, Config{Insecure: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- NewServer(c).Serve(ctx, ln) }()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var out []byte
	out = wire.AppendHello(out, hello("tcp1", 3))
	var e wire.BatchEncoder
	for i := range 5 {
		e.Reset(nil)
		e.Append(int64(i), 0, 10, []byte("0123456789"))
		out = append(out, e.Finish(uint64(i+1))...)
	}
	if _, err := conn.Write(out); err != nil {
		t.Fatal(err)
	}
	fr := wire.NewFrameReader(conn, wire.Limits{})
	h, _, err := fr.Next()
	if err != nil || h.Type != wire.TypeWelcome {
		t.Fatalf("first reply %s, %v", h.Type, err)
	}
	var acked uint64
	for acked < 5 {
		h, p, err := fr.Next()
		if err != nil || h.Type != wire.TypeAck {
			t.Fatalf("reply %s, %v", h.Type, err)
		}
		acked, _ = wire.ParseAck(p)
	}
	conn.(*net.TCPConn).CloseWrite()
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after goodbye: %v, want EOF", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	c.Close()
	if pkts, _ := readDir(t, filepath.Join(c.Dir(), "tcp1")); len(pkts) != 5 {
		t.Fatalf("%d packets written, want 5", len(pkts))
	}
}

// TestStatsBlockOnClose checks that the counters an agent reports end up
// in an interface statistics block when the file closes.
func TestStatsBlockOnClose(t *testing.T) {
	c := newCore(t, Config{})
	s, _, err := c.begin(hello("st", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	s.batch(0, batchPayload(1, 0, 4))
	s.commit()
	st := wire.AppendStats(nil, &wire.Stats{Time: 1_700_000_001_000_000_000, AgentDrops: 5,
		Interfaces: []wire.IfaceStats{{Index: 1, Received: 1000, KernelDrops: 17, QueueFreezes: 2, Captured: 983}}})
	if err := s.recordStats(st[wire.HeaderSize:]); err != nil {
		t.Fatal(err)
	}
	s.end(true)
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), "st"))
	b, err := os.ReadFile(filepath.Join(c.Dir(), "st", ents[0].Name()))
	if err != nil {
		t.Fatal(err)
	}
	// Walk the blocks (little-endian: type u32, total length u32).
	var isb []byte
	for off := 0; off+12 <= len(b); {
		typ := binary.LittleEndian.Uint32(b[off:])
		n := int(binary.LittleEndian.Uint32(b[off+4:]))
		if n < 12 || off+n > len(b) {
			t.Fatalf("bad block at %d", off)
		}
		if typ == 5 {
			isb = b[off : off+n]
		}
		off += n
	}
	if isb == nil {
		t.Fatal("no interface statistics block")
	}
	if id := binary.LittleEndian.Uint32(isb[8:]); id != 1 {
		t.Fatalf("ISB for interface %d, want 1", id)
	}
	opts := map[uint16]uint64{}
	for o := 20; o+4 <= len(isb)-4; {
		code, l := binary.LittleEndian.Uint16(isb[o:]), int(binary.LittleEndian.Uint16(isb[o+2:]))
		if code == 0 {
			break
		}
		if l == 8 {
			opts[code] = binary.LittleEndian.Uint64(isb[o+4:])
		}
		o += 4 + (l+3)&^3
	}
	if opts[4] != 1000 || opts[7] != 17 || opts[8] != 983 {
		t.Fatalf("ISB counters ifrecv=%d osdrop=%d usrdeliv=%d, want 1000 17 983", opts[4], opts[7], opts[8])
	}
	if !bytes.Contains(isb, []byte("agent queue drops (all interfaces): 5")) {
		t.Fatal("ISB comment lacks the agent's queue drops")
	}
}

// TestSequenceGapCounted: a TCP session whose batches skip sequence
// numbers (batches lost before they arrived) writes what arrives and
// counts what is missing, rather than hiding it.
func TestSequenceGapCounted(t *testing.T) {
	c := newCore(t, Config{})
	s, _, err := c.begin(hello("gap", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{1, 2, 5, 6, 9} {
		if dup, err := s.batch(0, batchPayload(seq, int(seq)*10, 10)); dup || err != nil {
			t.Fatalf("batch %d: dup %v, %v", seq, dup, err)
		}
	}
	if got, err := s.commit(); got != 9 || err != nil {
		t.Fatalf("Commit = %d, %v", got, err)
	}
	s.end(true)
	if n := c.Counters.MissingBatches.Load(); n != 4 {
		t.Errorf("missing batches %d, want 4 (3, 4, 7, 8)", n)
	}
	if pkts, _ := readDir(t, filepath.Join(c.Dir(), "gap")); len(pkts) != 50 {
		t.Errorf("%d packets written, want the 50 that arrived", len(pkts))
	}
}

// TestUncheckedBatch: over a stream transport a batch without a
// checksum (as agents send inside TLS) is written like any other.
func TestUncheckedBatch(t *testing.T) {
	c := newCore(t, Config{})
	s, _, err := c.begin(hello("a1", 1), Peer{}, func() {})
	if err != nil {
		t.Fatal(err)
	}
	var e wire.BatchEncoder
	e.Unchecked = true
	e.Reset(nil)
	e.Append(1_700_000_000_000_000_000, 1, 80, make([]byte, 60))
	frame := e.Finish(1)
	if frame[3]&wire.FlagUnchecked == 0 {
		t.Fatalf("flags 0x%02x: the encoder did not mark the batch unchecked", frame[3])
	}
	if _, err := s.batch(frame[3], frame[wire.HeaderSize:]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.commit(); err != nil {
		t.Fatal(err)
	}
	s.end(true)
	pkts, _ := readDir(t, filepath.Join(c.Dir(), "a1"))
	if len(pkts) != 1 || pkts[0].OrigLen != 80 {
		t.Fatalf("got %d packets, want the one of the unchecked batch", len(pkts))
	}
	if got := c.Counters.Unchecked.Load(); got != 1 {
		t.Errorf("unchecked counter %d, want 1", got)
	}
}

// TestBeginStoreError: a store that cannot take an agent (here its
// lock directory cannot be made) makes begin busy, not a rejection: an
// agent retries, and a Kafka writer does not skip the record (it skips
// only what is rejected).
func TestBeginStoreError(t *testing.T) {
	c := newCore(t, Config{Store: store.Config{Shared: true}})
	locks := filepath.Join(c.Dir(), store.LockDir)
	if err := os.RemoveAll(locks); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(locks, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	_, _, err := c.begin(hello("web1", 1), Peer{}, func() {})
	if !errors.Is(err, ErrBusy) || errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "lock directory") {
		t.Fatalf("begin with the lock directory a file: %v; want busy, saying why", err)
	}
	if n := c.Counters.Rejected.Load(); n != 0 {
		t.Errorf("%d handshakes counted rejected", n)
	}
	if err := os.Remove(locks); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.begin(hello("web1", 1), Peer{}, func() {}); err != nil {
		t.Fatalf("begin once the store can take the agent: %v", err)
	}
}

// TestVerifiedPeer: a batch whose checksum field does not match is
// refused from a peer whose transport checks nothing, and written from
// one whose transport verified a checksum over its bytes (Peer.Verified:
// the Kafka writer).
func TestVerifiedPeer(t *testing.T) {
	c := newCore(t, Config{})
	for i, tc := range []struct {
		name     string
		peer     Peer
		accepted bool
	}{
		{"tcp", Peer{Transport: "tcp"}, false},
		{"kafka", Peer{Transport: "kafka", Verified: true}, true},
	} {
		s, _, err := c.begin(hello(tc.name, byte(i+1)), tc.peer, func() {})
		if err != nil {
			t.Fatal(err)
		}
		p := batchPayload(1, 0, 10)
		p[24] ^= 0xff // the crc32c field
		_, err = s.batch(0, p)
		switch {
		case tc.accepted && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case !tc.accepted && !errors.Is(err, wire.ErrChecksum):
			t.Errorf("%s: err = %v, want ErrChecksum", tc.name, err)
		}
		s.commit()
		s.end(true)
	}
	if pkts, _ := readDir(t, filepath.Join(c.Dir(), "kafka")); len(pkts) != 10 {
		t.Errorf("%d packets written from the verified peer, want 10", len(pkts))
	}
}
