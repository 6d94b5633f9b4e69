package store

import "time"

// rootMode is the one place where the two ways a Store holds its root
// differ (Config.Shared), chosen once by Open:
//
//   - owned (owned.go): one Store owns the root. StateFile holds the
//     marks of every instance; Open starts repairing every agent's
//     unfinished files; an agent's Writer is made at its first use and
//     kept until Release.
//   - shared (shared.go): the Stores of a writer group share the root.
//     Each holds the agents it takes (a lock per agent), keeps their
//     marks in their own state files (AgentStateDir), repairs their
//     files when it takes them, and gives them back at Release and
//     Close.
//
// The owner lock of the root (owner.go) is taken by Open before the
// Store, and so its mode, exists; retention gets Config.Shared as an
// option of its own (retain.go). Methods are called without a Store
// lock held unless they say otherwise.
type rootMode interface {
	// start ends Open: it starts the repairs of the root's unfinished
	// files, or readies the Store to run none.
	start() error
	// tempAge is how old a temporary file of the root's state must be
	// for Open to take it as left by a crash and remove it (0: any).
	tempAge() time.Duration
	// writer returns a new Writer of agent name, which has none. s.mu
	// is held; it may be let go meanwhile, the agent marked moving.
	writer(name string) (*Writer, error)
	// saveMarks saves the marks of agent name: before a file of its is
	// published, and after a repair.
	saveMarks(name string) error
	// saveAll saves the marks of every instance the Store holds
	// (saveState's work).
	saveAll() error
	// publish publishes closed .part files (Run's retries of those
	// whose publish failed).
	publish(parts []string) error
	// releasing takes from s.unpublished the files of agent name that
	// its release publishes; s.mu is held.
	releasing(name string) []string
	// released ends the Release of agent name's Writer w, its file
	// closed with err: it publishes parts (and the file just closed)
	// and gives the agent back.
	released(name string, w *Writer, parts []string, err error) error
	// closing ends Close once every file is closed and published: it
	// gives back every agent of ws.
	closing(ws []*Writer)
}

// newMode returns the mode of s, by its Config.
func newMode(s *Store) rootMode {
	if s.cfg.Shared {
		return sharedRoot{s}
	}
	return ownedRoot{s}
}
