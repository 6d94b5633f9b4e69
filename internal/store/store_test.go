package store

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// testCore is a Store driven as the collector drives it: sessions of
// in-order batches (testSession), with the collector's shutdown timeout.
type testCore struct {
	*Store
	missing uint64 // batches a session's sequence skipped
}

// openCore opens a Store; the repair of unfinished files may still run.
func openCore(cfg Config) (*testCore, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.RotateInterval == 0 {
		// Off unless a test asks: with the hourly default, a test running
		// across the top of an hour finds two files where it wants one.
		cfg.RotateInterval = -1
	}
	st, err := Open(cfg)
	if err != nil {
		return nil, err
	}
	return &testCore{Store: st}, nil
}

// newCore opens a Store below a new temporary directory unless cfg.Dir
// is set, and waits for its repairs.
func newCore(t testing.TB, cfg Config) *testCore {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := openCore(cfg)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Repaired() // most tests want the files repaired before they Begin
	return c
}

// die gives up the Store's root as a process that died does: its owner
// lock goes (the descriptors it still has open are the test's to close).
func (c *testCore) die() {
	c.owner.Close()
}

// Close closes the Store, letting a repair run for up to 10s (the
// collector's default shutdown timeout).
func (c *testCore) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Store.Close(ctx)
}

// testSession writes one agent instance's batches as a collector
// session does: in order, dropping those at or below the instance's
// mark or the highest written.
type testSession struct {
	c       *testCore
	w       *Writer
	inst    *Instance
	ifmap   []int
	pending uint64
	decoded bool // write with Decode and WriteDecoded, as the collector does
}

// Begin starts a session for h; the Welcome holds the instance's mark.
func (c *testCore) Begin(h *wire.Hello, kick func()) (*testSession, wire.Welcome, error) {
	w, err := c.Writer(h.Name)
	if err != nil {
		return nil, wire.Welcome{}, err
	}
	inst := c.Instance(h.Instance, h.Name)
	if inst.Name() != h.Name {
		return nil, wire.Welcome{}, errors.New("instance of another agent")
	}
	w.Start(h.Host)
	s := &testSession{c: c, w: w, inst: inst}
	for _, ifc := range h.Interfaces {
		fi, err := w.AddInterface(ifc)
		if err != nil {
			return nil, wire.Welcome{}, err
		}
		s.ifmap = append(s.ifmap, fi)
	}
	return s, wire.Welcome{LastSeq: inst.LastSeq()}, nil
}

// Batch writes a raw batch frame's payload unless it is a duplicate.
func (s *testSession) Batch(flags uint8, payload []byte) (dup bool, err error) {
	b, err := wire.ParseBatch(flags, payload, wire.BatchLimits{Unchecked: true})
	if err != nil {
		return false, err
	}
	if b.Codec != wire.CodecNone {
		return false, errors.New("testSession: compressed batch")
	}
	prev := max(s.inst.LastSeq(), s.pending)
	if b.Seq <= prev {
		return true, nil
	}
	if s.decoded {
		recs, err := b.Decode(uint32(len(s.ifmap)), nil)
		if err != nil {
			return false, err
		}
		if _, err := s.w.WriteDecoded(&b, recs, s.ifmap, s.inst); err != nil {
			s.pending = s.inst.LastSeq()
			return false, err
		}
	} else {
		if err := b.Validate(uint32(len(s.ifmap))); err != nil {
			return false, err
		}
		if _, err := s.w.WriteBatch(&b, s.ifmap, s.inst); err != nil {
			s.pending = s.inst.LastSeq()
			return false, err
		}
	}
	if b.Seq > prev+1 {
		s.c.missing += b.Seq - prev - 1
	}
	s.pending = b.Seq
	return false, nil
}

// Commit commits and returns the sequence number to acknowledge.
func (s *testSession) Commit() (uint64, error) {
	err := s.w.Commit()
	if err != nil {
		s.pending = s.inst.LastSeq()
	}
	return s.inst.LastSeq(), err
}

// End ends the session: a goodbye closes the file, a lost connection
// leaves it for the idle close.
func (s *testSession) End(clean bool) {
	if clean {
		s.w.Close()
	} else {
		s.w.Linger()
	}
}

// The helpers shared with the collector's tests.
var (
	hello        = capturetest.Hello
	batchPayload = capturetest.BatchPayload
	readDir      = capturetest.ReadDir
)

type readPacket = capturetest.Packet
