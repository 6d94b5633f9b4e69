package kafkaio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/pcapsync/pcapsync/internal/collector"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/testutil"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// TestTakeOffTheLoop: an agent that cannot be taken yet (another
// writer of the group still holds it: Core.Begin busy, as during a long
// repair) does not stall the other agents of the poll: their batches
// are written and committed while its records wait, the partition's
// commit stops at its first record, and once the other writer gives it
// up its records are written and the commit moves past them. On the
// code before, the poll loop waited for the busy agent for up to
// BusyWait (a minute) before it committed anything else, and then
// started over.
func TestTakeOffTheLoop(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	core, err := collector.NewCore(collector.Config{Store: store.Config{Dir: dir, Shared: true, Fsync: store.FsyncNever, Logger: quiet}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close() })
	other, err := store.Open(store.Config{Dir: dir, Shared: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.Writer("busy"); err != nil { // held by the other writer
		t.Fatal(err)
	}
	w, err := NewWriter(WriterConfig{Topic: "t", Group: "g", Core: core, Release: core.Store().Release, BusyWait: 20 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	slow, fast := newTestAgent("busy", 1), newTestAgent("free", 2)
	recs := []*kgo.Record{slow.batch("t", 1, 10), fast.batch("t", 1, 10), slow.batch("t", 2, 10), fast.batch("t", 2, 10)}
	for i, r := range recs {
		r.Partition, r.Offset = 0, int64(i)
	}
	ctx := runTaker(t, w)
	wrote := make(chan error, 1)
	go func() { wrote <- w.write(ctx, recs) }()
	packets := func(name string) uint64 {
		for _, a := range core.AgentStats() {
			if a.Name == name {
				return a.Packets
			}
		}
		return 0
	}
	// The poll loop writes again after each poll, and at once when a
	// take ended; the test does that by hand.
	testutil.Eventually(t, 10*time.Second, func() error {
		if err := w.write(ctx, nil); err != nil {
			return errors.Join(errors.New("write"), err)
		}
		if n := packets("free"); n != 20 {
			return fmt.Errorf("free: %d of 20 packets written while busy waits", n)
		}
		return nil
	})
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if n := packets("busy"); n != 0 {
		t.Fatalf("busy: %d packets written while another writer holds it", n)
	}
	w.mu.Lock()
	points := w.commitPoints()
	w.mu.Unlock()
	if len(points) != 0 {
		t.Fatalf("commit points %v while the partition's first record waits, want none", points)
	}

	if err := other.Release("busy"); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		if err := w.write(ctx, nil); err != nil {
			return errors.Join(errors.New("write"), err)
		}
		if n := packets("busy"); n != 20 {
			return fmt.Errorf("busy: %d of 20 packets written once given up", n)
		}
		return nil
	})
	w.mu.Lock()
	points = w.commitPoints()
	w.mu.Unlock()
	if e, ok := points[0]; !ok || e.Offset != 4 {
		t.Fatalf("commit points %v, want partition 0 past every record (4)", points)
	}
}

// TestCorruptCompressedRecordSkipped: a zstd batch whose compressed
// bytes are corrupt under a good checksum (an ingest collector hands
// compressed batches on unopened) is refused where it is decompressed,
// in the writer: skipped and counted, raising no mark, and the agent's
// next batch is written.
func TestCorruptCompressedRecordSkipped(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	core, err := collector.NewCore(collector.Config{Store: store.Config{Dir: t.TempDir(), Shared: true, Fsync: store.FsyncNever, Logger: quiet}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { core.Close() })
	w, err := NewWriter(WriterConfig{Topic: "t", Group: "g", Core: core, Release: core.Store().Release, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	a := newTestAgent("z1", 1)
	bad := a.zbatch(t, "t", 1, 10)
	p := bad.Value[wire.HeaderSize:]
	p[wire.BatchHeaderSize] ^= 0xff // the zstd frame's magic
	crc := crc32.Update(crc32.Checksum(p[:24], crc32.MakeTable(crc32.Castagnoli)), crc32.MakeTable(crc32.Castagnoli), p[wire.BatchHeaderSize:])
	binary.LittleEndian.PutUint32(p[24:], crc)
	recs := []*kgo.Record{bad, a.zbatch(t, "t", 2, 10)}
	for i, r := range recs {
		r.Offset = int64(i)
	}
	ctx := runTaker(t, w)
	testutil.Eventually(t, 10*time.Second, func() error {
		if err := w.write(ctx, recs); err != nil {
			return err
		}
		recs = nil // taken once; then written once the take ended
		if n := core.Counters.Packets.Load(); n != 10 {
			return fmt.Errorf("%d of the second batch's 10 packets written", n)
		}
		return nil
	})
	if n, m := w.Counters.BadRecords.Load(), core.Counters.BadCompress.Load(); n != 1 || m != 1 {
		t.Errorf("bad records %d, corrupt batches %d; want 1, 1", n, m)
	}
}

// runTaker runs w's taker, as consume does, until the test ends, then
// gives every agent up; the context is the poll loop's.
func runTaker(t *testing.T, w *Writer) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go w.taker(ctx, done)
	t.Cleanup(func() {
		w.endAll(func(int32) bool { return true })
		cancel()
		<-done
	})
	return ctx
}
