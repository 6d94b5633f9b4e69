package collector

import (
	"fmt"

	"github.com/pcapsync/pcapsync/internal/wire"
)

// Session is a session of an intake outside this package (the Kafka
// writer): the same begin, frames, commit and end as the TCP server's,
// called from one goroutine.
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

// Frame handles one frame of the session: a Batch (written unless its
// sequence number shows it was written before: dup), a Stats or an
// Iface frame. Errors wrap ErrStorage for a failed write (nothing since
// the last Commit is in a file), otherwise they say what is wrong with
// the frame.
func (s *Session) Frame(t wire.Type, flags uint8, payload []byte) (dup bool, err error) {
	switch t {
	case wire.TypeBatch:
		return s.s.batch(flags, payload)
	case wire.TypeStats:
		return false, s.s.recordStats(payload)
	case wire.TypeIface:
		return false, s.s.iface(payload)
	}
	return false, fmt.Errorf("unexpected %s frame: %w", t, wire.ErrUnknownType)
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
