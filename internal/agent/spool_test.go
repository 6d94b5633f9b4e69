package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func pushN(t *testing.T, q *queue, n, packets int) [][]byte {
	t.Helper()
	var frames [][]byte
	for i := range n {
		b := q.get()
		var e wire.BatchEncoder
		e.Reset(b.buf[:0])
		for j := range packets {
			e.Append(int64(i*1000+j), 0, 300, bytes.Repeat([]byte{byte(i)}, 300))
		}
		if !q.push(b, &e, wire.CodecNone, packets, 1, false) {
			t.Fatalf("push %d refused", i)
		}
		fb := q.at(q.stats().lastSeq)
		frame := fb.buf
		if frame == nil {
			var err error
			if frame, err = q.spool.read(fb, nil); err != nil {
				t.Fatal(err)
			}
		}
		frames = append(frames, bytes.Clone(frame))
	}
	return frames
}

// TestSpoolResumesAfterCrash: a "crashed" run leaves batches in the
// spool; the next run gets the same instance id, every batch back with
// its bytes, and a torn tail cut off.
func TestSpoolResumesAfterCrash(t *testing.T) {
	dir := t.TempDir()
	sp, id1, rec, err := openSpool(dir, 1<<30, true, quiet)
	if err != nil || len(rec) != 0 {
		t.Fatalf("first open: %v, %d recovered", err, len(rec))
	}
	q := newQueue(1<<20, 1<<20)
	q.spool = sp
	frames := pushN(t, q, 10, 50) // 10 x ~15 KiB: the last ones beyond memory
	q.ack(4)
	// Crash mid-write: half a frame at the end of the segment.
	seg := sp.current()
	seg.f.Write(frames[0][:100])
	sp.close()

	sp2, id2, rec, err := openSpool(dir, 1<<30, true, quiet)
	if err != nil {
		t.Fatal(err)
	}
	defer sp2.close()
	if id2 != id1 {
		t.Fatal("instance id changed across the restart")
	}
	if len(rec) != 10 || rec[0].seq != 1 || rec[9].seq != 10 {
		t.Fatalf("recovered %d batches (want 1..10)", len(rec))
	}
	q2 := newQueue(1<<20, 1<<20)
	q2.spool = sp2
	q2.recover(rec, 1)
	q2.ack(4) // what the collector's welcome says it holds
	for seq := uint64(5); seq <= 10; seq++ {
		b := q2.at(seq)
		got, err := sp2.read(b, nil)
		if err != nil || !bytes.Equal(got, frames[seq-1]) {
			t.Fatalf("batch %d read back wrong (%v)", seq, err)
		}
	}
	if q2.at(4) != nil || q2.stats().lastSeq != 10 {
		t.Fatalf("after ack(4): %+v", q2.stats())
	}
	if st := q.stats(); st.sealedPackets != 10*50 {
		t.Errorf("the first run sealed %d packets, want %d", st.sealedPackets, 10*50)
	}
	if st := q2.stats(); st.sealedPackets != 0 || st.queuedPackets != 0 || st.recoveredPackets != 10*50 ||
		st.ackedPackets != 0 || st.recoveredAcked != 4*50 {
		t.Errorf("after the restart: sealed %d, queued %d, recovered %d, acked %d (recovered %d) packets; want 0, 0 (recovered batches are not this run's), %d, 0 and %d",
			st.sealedPackets, st.queuedPackets, st.recoveredPackets, st.ackedPackets, st.recoveredAcked, 10*50, 4*50)
	}
	// New batches continue the sequence.
	more := pushN(t, q2, 1, 5)
	if len(more) != 1 || q2.stats().lastSeq != 11 {
		t.Fatalf("next sequence %d, want 11", q2.stats().lastSeq)
	}
	if got := q2.stats().sealedPackets; got != 5 {
		t.Errorf("the second run sealed %d packets, want 5", got)
	}
	q2.ack(11)
	if st := q2.stats(); st.ackedPackets != 5 || st.recoveredAcked != 10*50 {
		t.Errorf("all acknowledged: %d of this run's packets, %d recovered; want 5 and %d", st.ackedPackets, st.recoveredAcked, 10*50)
	}

	// A replay does not resume: it starts its input over.
	sp2.close()
	sp3, id3, rec, err := openSpool(dir, 1<<30, false, quiet)
	if err != nil || len(rec) != 0 || id3 == id1 {
		t.Fatalf("replay open: %v, %d recovered, same id %v", err, len(rec), id3 == id1)
	}
	sp3.close()
}

// TestSpoolOverflow replays more than the memory queue holds while the
// collector is away: batches overflow to disk, are read back when sent,
// and a real collector receives every packet exactly once, in order.
func TestSpoolOverflow(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "in.pcap")
	if err := gen.WriteFile(path, gen.FileConfig{Count: 20000, Mix: gen.MixIMIX}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // the collector is down at first

	a, err := New(Config{Collectors: []string{addr}, Name: "sp", ReadFile: path, QueueBytes: 1 << 20, BatchBytes: 64 << 10, Insecure: true,
		Spool: filepath.Join(dir, "spool"), BackoffMin: 20 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan Summary, 1)
	go func() { s, _ := a.Run(context.Background()); done <- s }()
	testutil.Eventually(t, 10*time.Second, func() error {
		if n := a.q.stats().queuedPackets; n < 20000 {
			return fmt.Errorf("%d of 20000 packets queued with the collector away", n)
		}
		return nil
	})
	qs := a.q.stats()
	if qs.queuedPackets != 20000 || a.q.bytes > a.q.limit {
		t.Fatalf("with the collector away: %d packets queued, %d bytes in memory (limit %d)", qs.queuedPackets, a.q.bytes, a.q.limit)
	}
	ents, _ := os.ReadDir(filepath.Join(dir, "spool"))
	t.Logf("spool holds %d files, %d bytes; memory %d bytes", len(ents), a.q.spool.bytes, a.q.bytes)

	core, err := collector.NewCore(collector.Config{Store: store.Config{Dir: filepath.Join(dir, "out")}, Logger: quiet, Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- collector.NewServer(core).Serve(ctx, ln) }()
	var sum Summary
	select {
	case sum = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("agent did not finish")
	}
	cancel()
	<-served
	core.Close()
	if sum.Acked != 20000 || core.Counters.Packets.Load() != 20000 || core.Counters.Duplicates.Load() != 0 {
		t.Fatalf("summary %+v; collector wrote %d, duplicates %d", sum, core.Counters.Packets.Load(), core.Counters.Duplicates.Load())
	}
}

// TestSpoolAckedMark: a run that stops with every batch acknowledged
// leaves its newest segment, whose batches the next run loads (they
// carry the sequence on) but does not count as to resend; one that
// stops with some unacknowledged counts exactly those; a crash, which
// saves no mark, counts from the last mark saved; a replay, which
// starts a new instance, drops the mark with the batches.
func TestSpoolAckedMark(t *testing.T) {
	dir := t.TempDir()
	reopen := func(resume bool) (*spool, *queue, []*batch) {
		t.Helper()
		sp, _, rec, err := openSpool(dir, 1<<30, resume, quiet)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sp.close)
		q := newQueue(1<<20, 1<<20)
		q.spool = sp
		q.recover(rec, 1)
		return sp, q, rec
	}
	seqs := func(bs []*batch) []uint64 {
		var out []uint64
		for _, b := range bs {
			out = append(out, b.seq)
		}
		return out
	}
	sp, q, _ := reopen(true)
	pushN(t, q, 10, 5)
	q.ack(10)
	sp.saveAcked(q.stats().acked) // a clean stop
	sp.close()

	sp, q, rec := reopen(true)
	if len(rec) == 0 {
		t.Fatal("no batch loaded after a clean stop: the case this test is about is gone")
	}
	if un := sp.unacked(rec); len(un) != 0 {
		t.Fatalf("after a clean stop with everything acknowledged: %v to resend, want none", seqs(un))
	}
	pushN(t, q, 5, 5) // 11..15
	q.ack(12)
	sp.saveAcked(q.stats().acked) // stopped with 13..15 unacknowledged
	sp.close()

	sp, q, rec = reopen(true)
	if got := seqs(sp.unacked(rec)); fmt.Sprint(got) != "[13 14 15]" {
		t.Fatalf("after a stop with 13..15 unacknowledged: %v to resend", got)
	}
	pushN(t, q, 2, 5) // 16, 17
	q.ack(16)
	sp.close() // a crash: no mark saved

	sp, _, rec = reopen(true)
	if got := seqs(sp.unacked(rec)); fmt.Sprint(got) != "[13 14 15 16 17]" {
		t.Fatalf("after a crash: %v to resend, want 13..17 (the last mark is 12)", got)
	}
	sp.close()

	sp, _, rec = reopen(false) // a replay: a new instance
	if len(rec) != 0 || sp.prevAcked != 0 {
		t.Fatalf("replay: %d batches, mark %d; want none", len(rec), sp.prevAcked)
	}
	if _, err := os.Stat(filepath.Join(dir, ackedFile)); !os.IsNotExist(err) {
		t.Fatalf("replay left the old instance's mark: %v", err)
	}
}
