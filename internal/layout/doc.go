// Package layout is an output root of pcapng files as its writer
// (internal/store) and its readers (a query, the index rebuild,
// retention) both see it, without a Store: what a name means, where a
// batch ends, which files an agent has.
//
// # Layout
//
// Root/<agent>/<agent>_<UTC start>Z[_NNN].pcapng[.gz|.zst] are finished
// data files (IsDataFile); the one being written ends in PartSuffix and
// loses it once it is complete. Beside each is its index (index.Path).
// Agents lists the agent directories, AgentFiles an agent's files.
// Root/RetainDir holds retention's saved index of closed files, one
// document per agent (IndexDoc), which AgentFiles uses for the files'
// times, and ListAgent for what retention removed (Removed). Names at the top of the root starting with OwnPrefix are the
// writer's own (state, reserve, locks); agent names cannot start with
// '.'.
//
// # Marks
//
// The last packet of every batch carries a mark (MarkPEN, MarkMagic):
// a batch is in a file exactly when its mark is. Scan reads a data
// file, compressed or not, as one stream in bounded memory and finds
// the last point where it ends after a marked batch: where repair cuts
// an unfinished file, and how far a reader of a .part may read
// (CompleteLength, PartTail).
//
// # Hostile roots
//
// The root may be writable by others. Every file is opened without
// following a link and never a FIFO or device (internal/safefs); an
// agent directory that is a link is refused (ErrAgentDir); the saved
// index is read with a size limit and its entries checked (ParseIndex),
// and trusted for a file only at the size and modification time it
// lists.
//
// # Contracts
//
// Every function is safe for concurrent use and keeps no state between
// calls; a PartTail's methods are safe for concurrent use. Files listed
// may be removed (retention) or renamed (a .part published) before the
// caller opens them. Layout imports no writer and no reader: the store
// and the query both import it.
package layout
