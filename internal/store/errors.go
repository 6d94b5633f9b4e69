package store

import (
	"errors"

	"github.com/pcapsync/pcapsync/internal/layout"
)

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

// ErrRootBusy: Open found the output root held by another owner (see
// OwnerFile): a Store of another process, or of this one, in exclusive
// mode, or a writer group other than Config.Group. The error names the
// holder as its owner file describes it.
var ErrRootBusy = errors.New("output root held by another owner")

// ErrAgentDir: an agent's directory below the root is not a directory
// the Store can write safely (a symbolic link, or not a directory):
// Store.Writer refuses the agent until it is put right by hand.
var ErrAgentDir = layout.ErrAgentDir

// ErrRootUnusable: Open found the output root missing and was denied
// making it, or denied writing it (permissions, a read-only file
// system). The error names the
// directory, the system's reason and the command that puts it right
// (the directory made for, or given to, the user the process runs as;
// under systemd, the unit's ReadWritePaths=). Starting again does not
// help until that is done.
var ErrRootUnusable = errors.New("output root unusable")
