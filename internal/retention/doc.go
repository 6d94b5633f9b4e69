// Package retention deletes closed data files of an output root,
// oldest first by the time of their last packet, to keep the rules of
// Config:
//
//   - age: files whose last packet is older than MaxAge go;
//   - agent: an agent's files (closed and open) above AgentBytes: its
//     own oldest go;
//   - size: the root's data files above MaxBytes: the oldest of all
//     agents go;
//   - free: less than FreePercent or FreeBytes of the filesystem free
//     (statfs: every program's use counts): the oldest of all agents go.
//
// Only closed files are deleted, never the one being written (.part),
// never a file held by a reader (Enforcer.Hold). The size and free
// rules keep the newest closed file of every agent, so one busy agent, or
// another root or program on the same filesystem, can never take an
// agent's whole history. Each size rule has a high and a low
// watermark below its limit: deletion starts above the high one and
// goes on to the low one, so it begins before the limit is reached and
// usage stays below it at full ingest as long as deleting keeps up;
// the margin is a tenth of the limit or one rotation file, whichever
// is smaller. Deletion runs on its own goroutine (Enforcer.Run, which
// the Store starts from its Run), woken every tick and whenever the writers have written a
// step of bytes (an atomic add and a non-blocking send on the write
// path; a write never waits for an unlink). Only when deletion falls
// behind by more than the watermarks allow does a write wait, at the
// write gate (gate.go), until usage is back under the limit.
//
// The index of closed files (agent, name, bytes, first and last packet)
// is kept in memory, recorded when the Store closes a file, and saved
// per agent below Dir/layout.RetainDir (without fsync: it is a cache). At
// start it is rebuilt from the agent directories: a file the saved
// index lists with the same size and modification time keeps its
// times, any other is read (layout.Scan) for its first and last packet.
// Only the data files the Store names (layout.IsDataFile) are indexed and
// deleted, in agent directories that are not links; anything else
// below the root is left alone and logged once (foreign). An agent whose directory is
// gone (removed by hand) is dropped from the index, with its saved
// index, at start, every goneCheckInterval and when a deletion finds
// one of its files gone (dropGone, forgetAgent).
//
// The saved index also records what retention deleted of the agent's
// files (layout.Removed: files, bytes, oldest and newest packet),
// loaded at start and grown at each deletion, so that a query can say
// that packets of its range were removed; in Shared mode the holder's
// save merges its record with the saved one's.
//
// # Policy and enforcer
//
// The policy (policy.go: Watermarks, which file goes first) is a set of
// functions of file metadata (layout.IndexedFile), limits and the write
// rate. The Enforcer applies it: its goroutine, its counters
// (Counters), the saved index (layout.RetainDir), in Shared mode the
// leader's lock (LockFile, shared.go), and the write gate (gate.go).
//
// # Events
//
// The writer of the root (internal/store) feeds the Enforcer through
// one handle per agent (Enforcer.Agent): Agent.Note with an Event
// (bytes written, buffered, flushed; a file closed; in Shared mode the
// agent taken or released), and Agent.Admit, the write gate, before it
// writes a batch. Note never waits and, for the write path's events,
// takes no lock and allocates nothing.
//
// Retention imports the layout (internal/layout) and safefs; never the
// store, the collector or a reader.
package retention
