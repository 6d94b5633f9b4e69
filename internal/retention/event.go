package retention

import "github.com/pcapsync/pcapsync/internal/layout"

// EventKind says what the writer of an agent's files did.
type EventKind uint8

// The events, as the writer of an agent's files reports them (Note).
const (
	// Wrote: Bytes more bytes of the open file reached the filesystem
	// (a flush, or its index written); First, when not 0, is the Unix
	// ns of the open file's first packet.
	Wrote EventKind = iota + 1
	// Buffered: Bytes are in the open file's write buffer after a
	// batch, not yet on the filesystem (statfs does not count them).
	Buffered
	// Flushed: everything written, and admitted at the gate, is now
	// counted by Wrote.
	Flushed
	// Closed: the open file was closed. Kept: it stays, as Name (its
	// final name, without layout.PartSuffix) of Bytes bytes (with its
	// index), modified at Mod (Unix ns), its packets' times Times;
	// else it was removed (it held no complete batch).
	Closed
	// Taken: (Shared) this process took the agent: it writes the
	// agent's saved index from now on.
	Taken
	// Released: (Shared) this process gives the agent back: its saved
	// index is written, now, for the next holder.
	Released
)

// Event is one thing the writer of an agent's files tells retention;
// the fields each kind uses are listed with it.
type Event struct {
	Kind  EventKind
	Bytes int64
	First int64
	Name  string
	Mod   int64
	Times layout.TimeRange
	Kept  bool
}

// Note tells the Enforcer ev, an event of its agent's files. It never
// waits for a deletion; Wrote, Buffered and Flushed take no lock and
// allocate nothing (the write path calls them), Released writes the
// agent's saved index. Admit is the one call that may wait.
func (a *Agent) Note(ev Event) {
	switch ev.Kind {
	case Wrote:
		a.wrote(ev.Bytes, ev.First)
	case Buffered:
		a.buffered.Store(ev.Bytes)
	case Flushed:
		a.flushed()
	case Closed:
		a.closed(ev.Name, ev.Bytes, ev.Mod, ev.Times, ev.Kept)
	case Taken:
		a.shared.held.Store(true)
	case Released:
		a.r.release(a.name)
	}
}

// Admit waits at the write gate until n more bytes of the agent may be
// written, and counts them in its usage until the next Flushed (see
// gate.go): usually at once.
func (a *Agent) Admit(n int64) { a.admit(n) }
