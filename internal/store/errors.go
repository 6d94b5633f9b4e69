package store

import "errors"

// ErrBusy: an agent cannot be written now (Store.Writer): its files
// left unfinished by a previous run are being repaired, so its
// high-water marks are not known yet, or (Config.Shared) another
// process or Store holds it, or this Store is releasing it. Ask again
// later.
var ErrBusy = errors.New("agent busy")

// ErrReleased: the Writer's agent was released (Store.Release, or
// Store.Close in Shared mode); it writes nothing more. Store.Writer
// returns a new Writer once the agent is taken again.
var ErrReleased = errors.New("agent released")

// ErrCutBack: Commit found that the open file was cut back to its last
// commit (a rotation or close failed) after batches were written: they
// are in no file, and the marks stay where they were.
var ErrCutBack = errors.New("file was cut back after a write error")
