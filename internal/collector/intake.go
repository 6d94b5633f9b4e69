package collector

import (
	"fmt"
	"slices"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Session is a session of an intake outside this package (the Kafka
// writer): the same begin, batches, stats, interfaces, commit and end as
// the TCP server's, taken as parsed values rather than frames, called
// from one goroutine at a time.
type Session struct{ s *session }

// Begin validates a Hello from peer and opens a session for it, as a
// TCP connection's handshake does: a live session of the same agent
// name is ended first (its kick is called and Begin waits for its End).
// Errors wrap ErrRejected (the hello is refused for good) or ErrBusy
// (try again later).
func (c *Core) Begin(h *wire.Hello, peer Peer, kick func()) (*Session, wire.Welcome, error) {
	s, w, err := c.begin(h, peer, kick)
	if err != nil {
		return nil, w, err
	}
	return &Session{s}, w, nil
}

// Batch writes batch b, parsed from a Batch frame's flags and payload
// by the caller (its checksum verified, unless Peer.Verified says the
// transport did), unless its sequence number shows it was written
// before (dup). Errors wrap ErrStorage for a failed write (nothing since
// the last Commit is in a file), otherwise they say what is wrong with
// the batch (nothing of it written).
func (s *Session) Batch(b *wire.Batch, flags uint8, payload []byte) (dup bool, err error) {
	return s.s.write(b, flags, payload, true)
}

// Info takes what the agent tells of itself (its version, for
// AgentStats); a zero Info changes nothing.
func (s *Session) Info(in *wire.Info) { s.s.setVersion(in.Version) }

// Stats records a Stats frame's payload.
func (s *Session) Stats(payload []byte) error { return s.s.recordStats(payload) }

// Declare declares the interfaces of ifcs past those the session has,
// in order; ifcs must begin with the session's (Interfaces).
func (s *Session) Declare(ifcs []wire.Interface) error {
	if n := len(s.s.ifaces); len(ifcs) < n || !slices.Equal(ifcs[:n], s.s.ifaces) {
		return fmt.Errorf("interfaces: %d given, not beginning with the session's %d: %w", len(ifcs), n, wire.ErrMalformed)
	}
	for i := len(s.s.ifaces); i < len(ifcs); i++ {
		if err := s.s.addIface(uint32(i), ifcs[i]); err != nil {
			return err
		}
	}
	return nil
}

// Commit makes what was written as durable as the fsync policy
// promises and returns the highest batch sequence number that is: every
// batch of the session up to it is in a file.
func (s *Session) Commit() (uint64, error) { return s.s.commit() }

// Interfaces returns the interfaces the session declared, in order.
func (s *Session) Interfaces() []wire.Interface { return s.s.ifaces }

// End ends the session: clean closes the agent's file at once (a
// writer giving the agent up), otherwise it stays open for the idle
// close time so that a new session continues it.
func (s *Session) End(clean bool) { s.s.end(clean) }
