package agent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pcapsync/pcapsync/internal/capture"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// liveSource captures from one interface. Its goroutine is the only one
// that reads and closes the handle: Close from elsewhere could unmap the
// ring under a packet being copied.
type liveSource struct {
	a        *Agent
	h        *capture.Handle
	index    int
	limit    rateLimiter
	captured atomic.Uint64
	bytes    atomic.Uint64 // captured bytes (as kept, up to the snaplen)
	limited  atomic.Uint64 // packets dropped by the rate limit
	stopped  atomic.Bool
}

func (a *Agent) openLive() error {
	filter := a.tr.ownTraffic()
	if a.cfg.Filter != "" {
		filter = "(" + a.cfg.Filter + ") and " + filter
	}
	flush := a.cfg.FlushInterval
	for _, name := range a.cfg.Interfaces {
		h, err := capture.Open(capture.Config{
			Interface:    name,
			Filter:       filter,
			SnapLen:      a.cfg.SnapLen,
			NoPromisc:    a.cfg.NoPromisc,
			RingSize:     a.cfg.RingSize,
			RingTime:     a.cfg.RingTime,
			BlockSize:    a.cfg.BlockSize,
			BlockTimeout: min(max(flush/16, time.Millisecond), 4*time.Millisecond),
			// A batch that stops growing (a pause in the traffic) is sealed
			// by the poll timeout: keep it a fraction of the flush interval.
			PollTimeout: min(max(flush/8, 2*time.Millisecond), 100*time.Millisecond),
		})
		var idx int
		if err == nil {
			idx, err = a.addIface(wire.Interface{Name: name, LinkType: h.LinkType(), SnapLen: uint32(h.SnapLen())})
			if err != nil { // Validate caps the interfaces: not reached
				h.Close()
			}
		}
		if err != nil {
			for _, src := range a.sources {
				src.(*liveSource).h.Close() // not running yet: safe
			}
			a.sources = nil
			return fmt.Errorf("agent: %w", err)
		}
		// The agent's rate is shared evenly by its interfaces; bursts of
		// a tenth of a second pass.
		rate := float64(a.cfg.MaxRate) / float64(len(a.cfg.Interfaces))
		a.sources = append(a.sources, &liveSource{a: a, h: h, index: idx, limit: newRateLimiter(rate, max(1, rate/10))})
	}
	snap := a.sources[0].(*liveSource).h.SnapLen()
	a.log.Info("capturing", "interfaces", a.cfg.Interfaces, "filter", filter, "snaplen", snap, "promisc", !a.cfg.NoPromisc)
	if snap < a.cfg.SnapLen {
		a.log.Info("packets longer than the capture ring's blocks hold are cut, their original length kept (a larger --block-size keeps them whole, at the cost of a larger ring)",
			"snaplen", snap, "asked", a.cfg.SnapLen)
	}
	return nil
}

// run reads until stop is called, then drains: packets the kernel
// already captured sit in a ring block that becomes readable only when
// it retires (BlockTimeout), so it keeps reading until a poll times out
// (PollTimeout > BlockTimeout) or drainLimit passes under steady traffic.
func (s *liveSource) run() error {
	defer func() {
		s.h.Close()
		if ks, err := s.h.Stats(); err == nil {
			s.a.log.Debug("capture ring", "iface", s.h.Name(), "blocks", ks.Blocks, "wakeups", ks.Wakeups, "gathers", ks.Gathers)
		}
	}()
	bd := s.a.newBuilder(false)
	defer bd.seal()
	flush := s.a.cfg.FlushInterval
	// Packets come in batches of what is ready in the ring: one lock and
	// one counter update per batch, not per packet (each a full memory
	// barrier, which a profile showed at a fifth of the agent's CPU).
	var ps [64]capture.Packet
	var drainUntil time.Time
	for {
		if drainUntil.IsZero() && s.stopped.Load() {
			drainUntil = time.Now().Add(drainLimit)
		}
		if !drainUntil.IsZero() && time.Now().After(drainUntil) {
			return nil
		}
		n, err := s.h.ReadBatch(ps[:])
		switch {
		case err == nil:
			limited, bytes := 0, 0
			for i := range ps[:n] {
				p := &ps[i]
				bytes += len(p.Data)
				if !s.limit.allow(p.Timestamp) {
					limited++
					continue
				}
				bd.add(p.Timestamp, s.index, p.OrigLen, p.Data, flush)
			}
			s.captured.Add(uint64(n))
			s.bytes.Add(uint64(bytes))
			if limited > 0 {
				s.limited.Add(uint64(limited))
			}
		case errors.Is(err, capture.ErrTimeout):
			if !drainUntil.IsZero() {
				return nil
			}
			bd.sealIfOlder(flush)
		case errors.Is(err, capture.ErrClosed):
			return nil
		default:
			return err
		}
	}
}

// drainLimit bounds the drain after stop under traffic that never pauses.
const drainLimit = 500 * time.Millisecond

func (s *liveSource) stop() { s.stopped.Store(true) }

func (s *liveSource) rateDrops() uint64 { return s.limited.Load() }

func (s *liveSource) capturedBytes() uint64 { return s.bytes.Load() }

func (s *liveSource) stats(st *wire.Stats) {
	ks, err := s.h.Stats()
	if err != nil {
		s.a.log.Warn("reading kernel counters", "iface", s.h.Name(), "err", err)
	}
	st.Interfaces = append(st.Interfaces, wire.IfaceStats{
		Index: uint32(s.index), Received: ks.Received, KernelDrops: ks.Dropped,
		QueueFreezes: ks.QueueFreezes, Captured: s.captured.Load(),
	})
}
