// Package store owns an output root of pcapng files, one directory per
// agent: the collector writes the batches it receives through it, and
// so can any other writer of the same layout (a tier writing batches
// read from Kafka), while readers (a query tool) rely on the layout and
// the marks it documents.
//
// # Layout
//
// Dir/<agent>/<agent>_<UTC start>.pcapng[.gz|.zst] are finished files;
// the one being written ends in layout.PartSuffix. Dir/StateFile holds the
// instances' high-water marks, Dir/ReserveFile space kept for it,
// Dir/OwnerFile the lock of the root's one owner (a Store in exclusive
// mode, or the Stores of one writer group): Open refuses a root another
// owner holds (ErrRootBusy). The root may be writable by others: every
// file below it is opened without following a link and never a FIFO or
// device (internal/safefs), and only names the Store makes are deleted. Files
// rotate by size and time (Config), close after a goodbye
// (Writer.Close) or an idle time (Writer.Linger), and lose their suffix
// once the marks they hold are saved (publish).
//
// # Retention
//
// Config.Retain (RetainConfig) deletes closed files, oldest first by
// their last packet, to keep the filesystem's free space, the root's
// size, each agent's size and the files' age within limits: that is
// internal/retention, whose Enforcer Store.Run runs on a goroutine of
// its own, fed by the writers' events (retain.go); Dir/RetainDir holds
// its index of closed files. Store.Hold keeps a file from it while a
// reader needs it.
//
// # Shared roots
//
// With Config.Shared several processes (Kafka writers) write one root,
// each its own agents (shared.go): Writer takes an agent's lock
// (Dir/LockDir/<agent>.lock, an flock; held elsewhere: ErrBusy), loads
// its marks from its own state file (Dir/AgentStateDir/<agent>.json)
// and repairs its .part files before it returns; Release (and Close)
// publishes its file, saves its marks and gives the lock back. One of
// the processes, the holder of Dir/RetainLockFile, deletes for
// retention, learning of the others' files from their indexes and
// from listings (internal/retention, shared.go). Hold, the reserve and the open-file
// budget are per process.
//
// # Parts
//
// The write path: store.go (Open, Writer, Run, Close), writer.go,
// file.go (an agent's file: rotation, marks, publish), budget.go (the
// open-file budget), filecompress.go, index.go (the index beside each
// file). Durability: repair.go (unfinished files after a crash),
// state.go (StateFile, the reserve), owner.go (the root's owner lock),
// and the two ways of holding a root, chosen once by Open (mode.go):
// owned.go (one Store) and shared.go (a writer group). Retention is
// internal/retention, fed by retain.go; the names, marks and read side
// are internal/layout.
//
// # Marks and delivery
//
// The last packet of every batch carries a mark (a pcapng custom
// option: instance id and batch sequence number), so a batch is in a
// file exactly when its mark is. An Instance's high-water mark
// (Instance.LastSeq) is raised by Writer.Commit once the batch reached
// the OS (and was synced under FsyncPerBatch), when files close, and
// when the repair of a file left unfinished by a crash finds marks; it
// survives restarts in the files and the state file. A writer that
// acknowledges batches acknowledges Instance.LastSeq after Commit, and
// drops as duplicates the batches at or below it.
//
// # Use
//
//	st, err := store.Open(store.Config{Dir: dir}) // checks the root, loads the state, starts repairs
//	go st.Run(ctx)                                // rotation by time, idle close, interval syncs
//	w, err := st.Writer(name)                     // ErrBusy while the agent's files are repaired
//	inst := st.Instance(id, name)                 // inst.LastSeq(): what is in files already
//	w.Start(host)
//	fi, err := w.AddInterface(ifc)                // file indexes for WriteBatch's ifmap
//	bytes, err := w.WriteBatch(&batch, ifmap, inst)
//	err = w.Commit()                              // then acknowledge inst.LastSeq()
//	w.Close()                                     // or w.Linger() when the peer was lost
//	st.Release(name)                              // Shared: give the agent to another process
//	st.Close(ctx)                                 // after Run returned and the last Writer call
//
// # Contracts
//
// Store, Writer and Instance are safe for concurrent use. A Writer
// writes batches in the order its calls take its lock: one goroutine
// at a time should write an agent's batches (the collector hands an
// agent name from session to session). WriteBatch takes a batch already
// decompressed and validated; it keeps no reference to it. Errors of
// WriteBatch and Commit mean that nothing since the last successful
// Commit is in a file: the file was cut back to it, and stays
// readable. Failed file operations are counted (Counters) and logged;
// the Store logs events, never a line per packet.
//
// A Config's zero value, but for Dir, means the defaults (Default...);
// Open refuses a Config that Validate refuses. The Store is not usable
// after Close.
//
// The layout of the root, the marks and the scanner that finds them,
// and the read side (the catalog of an agent's files, a .part's
// complete length) are internal/layout's, which readers use without a
// Store. Store imports layout, pcapfile, wire and the file compressors;
// never the collector.
package store
