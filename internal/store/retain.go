package store

import (
	"time"

	"github.com/pcapsync/pcapsync/internal/retention"
)

// Retention is internal/retention's: the Store starts its Enforcer from
// Config.Retain (Run), and its writers tell it what they write, close,
// take and release through one retention.Agent per agent (Note, and
// Admit at the write gate). These names are retention's, for the
// Store's callers.
type (
	RetainConfig   = retention.Config
	RetainCounters = retention.Counters
	RetainRule     = retention.Rule
	RetainStats    = retention.Stats
	RetainLimit    = retention.Limit
	AgentRetention = retention.AgentStats
)

// Retention's defaults, bounds and rules (see internal/retention).
const (
	DefaultRetainFreePercent = retention.DefaultFreePercent
	MaxRetainFreePercent     = retention.MaxFreePercent
	NumRules                 = retention.NumRules
	RetainLockFile           = retention.LockFile // below Dir: the retention leader's lock in Shared mode
)

// FormatRetainFree writes the free-space rule as the collector's
// --retain-free takes it (retention.FormatFree).
func FormatRetainFree(c RetainConfig) string { return retention.FormatFree(c) }

// newEnforcer returns the Store's retention, over its root, counting
// failed file operations in Counters.FileErrors and the descriptor of
// a file it reads in the open-file budget.
func (s *Store) newEnforcer() *retention.Enforcer {
	o := retention.Options{
		Dir: s.dir, Rotate: s.cfg.RotateSize, Shared: s.cfg.Shared, Logger: s.cfg.Logger,
		Errors: &s.Counters.FileErrors,
		Open: func() func() {
			s.budget.acquire(nil, time.Now())
			return func() { s.budget.release(nil) }
		},
	}
	if testRetainOptions != nil {
		testRetainOptions(&o)
	}
	return retention.New(s.cfg.Retain, o)
}

// testRetainOptions, nil outside tests, changes the options of the
// Enforcer of every Store opened (a Shared leader's pace).
var testRetainOptions func(*retention.Options)

// Retention returns retention's totals since Open.
func (s *Store) Retention() *RetainCounters { return &s.ret.Counters }

// RetainStats returns what retention sees now. It takes a lock that
// the writers take once per closed file.
func (s *Store) RetainStats() RetainStats { return s.ret.Stats() }

// Hold keeps the closed file at path (below Dir) from being deleted by
// retention until release is called: for a reader of the files (a query
// tool). A file being written (.part) is never deleted anyway.
func (s *Store) Hold(path string) (release func()) { return s.ret.Hold(path) }

// RetainLeader reports whether this Store deletes for retention: always
// when retention runs in exclusive mode, and in Shared mode while it
// holds the leader's lock.
func (s *Store) RetainLeader() bool { return s.ret.Leader() }
