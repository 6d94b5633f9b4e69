package store

import (
	"errors"
	"time"
)

// ownedRoot is the mode of a root one Store owns (see rootMode).
type ownedRoot struct{ s *Store }

func (m ownedRoot) start() error { return m.s.startRepairs() }

// tempAge: no other process writes the root.
func (ownedRoot) tempAge() time.Duration { return 0 }

func (m ownedRoot) writer(name string) (*Writer, error) { return m.s.newWriter(name), nil }

func (m ownedRoot) saveMarks(string) error { return m.s.saveState() }

func (m ownedRoot) saveAll() error { return m.s.writeRootState() }

func (m ownedRoot) publish(parts []string) error {
	return publish(m.s.saveState, m.s.cfg.Fsync != FsyncNever, parts)
}

// releasing: the agent's files whose publish failed are retried by Run
// with every other's.
func (ownedRoot) releasing(string) []string { return nil }

// released publishes the agent's files; those it could not are retried
// every tick.
func (m ownedRoot) released(_ string, _ *Writer, parts []string, err error) error {
	s := m.s
	if perr := m.publish(parts); perr != nil {
		s.mu.Lock()
		s.unpublished = append(s.unpublished, parts...) // retried every tick
		s.mu.Unlock()
		err = errors.Join(err, perr)
	}
	return err
}

// closing: there is nothing to give back.
func (ownedRoot) closing([]*Writer) {}
