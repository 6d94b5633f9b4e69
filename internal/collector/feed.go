package collector

import "github.com/pcapsync/pcapsync/internal/wire"

// A Feed sees every batch the collector writes, as it is written: the
// live views (a tap for Wireshark, a Redis stream) hang off it, apart
// from any transport. Set it in Config.Feed.
//
// Core calls Batch from the session's goroutine, right after the
// batch's packets went into the file (before the acknowledgement), once
// per batch written; an agent name has one session at a time, so its
// batches come in order, from one goroutine at a time: duplicates are not passed
// on. Batch must not block or do I/O: copy what it keeps into its own
// bounded queue and drop (and count) when that is full, so that no live
// view ever slows the files. Everything in ev is valid only during the
// call.
//
// A batch written but then lost to a storage error before its commit
// was already passed on; the agent resends it, and it is passed on
// again.
type Feed interface {
	Batch(ev *BatchEvent)
}

// BatchEvent is one written batch.
type BatchEvent struct {
	Agent string // the agent's name (its directory)
	Host  string // the host it reported
	// Ifaces are the session's interfaces; a record's IfIndex indexes
	// them. The file names an interface "<Agent>:<Name>".
	Ifaces []wire.Interface
	// Batch is the batch as written: decompressed (Codec is
	// wire.CodecNone), Records iterable with Batch.Iter(len(Ifaces)).
	Batch *wire.Batch
}

// Feeds passes every batch to each of its feeds in turn.
type Feeds []Feed

// Batch implements Feed.
func (fs Feeds) Batch(ev *BatchEvent) {
	for _, f := range fs {
		f.Batch(ev)
	}
}
