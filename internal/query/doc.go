// Package query reads the files of an output root (internal/store's
// layout) and writes the packets a Config selects, of every agent, as
// one pcapng stream in timestamp order: pcapsync query.
//
// # Selection
//
// Agents by name or glob (their directories), interfaces by glob over
// the names the files give them ("web1:eth0"), a time range [Since,
// Until) exact to the nanosecond per packet, a tcpdump-syntax filter
// (filter.Filter: libpcap's program per link type, run as tcpdump -r runs it),
// Count and MaxBytes. Files are chosen per agent (layout.AgentFiles): a
// closed file the retention index lists with its size is skipped when
// its first..last packet times miss the range; every other file (a
// .part, a file closed after the index was saved, a root without
// retention) is read. The time in a file's name is the collector's
// clock when it opened the file, not a bound on the agent's packet
// times (a replayed file holds packets of any age), so it only orders
// the files.
//
// # Order
//
// Within an agent's files, packets are in write order: batch after
// batch, each batch one interface's packets in capture order, the
// interfaces' batches interleaved, so timestamps go back by up to a
// batch's span where batches of two interfaces interleave. Each agent
// is a stream over its files in write order that holds its selected
// packets in a reorder window (Config.ReorderMem shared by the agents)
// and releases the oldest only when the window is full or the files are
// read: disorder within the window comes out exactly sorted; a packet
// older than one already released is ErrOutOfOrder, never written out
// of order. A k-way merge of the streams writes the output; equal
// timestamps keep agent name order, then the order of the files. Once a
// window's worth of packets at or after Until has been read from a
// file without one before Until, the rest of that file is not read.
//
// # Files
//
// Plain, gzip and zstd files are read alike (pcapfile.Open); a .part
// is read up to the end of its last complete batch
// (layout.CompleteLength), so a file still being written gives exactly
// what was acknowledged. One file per agent is open at a time, the next
// opened when the previous ends. A file removed before the query opens
// it (retention) fails the query with ErrFileGone naming it; one
// removed while open is read to its end (the descriptor keeps it).
//
// # Output
//
// A section header, an interface description block per (name, link
// type, snaplen) before its first packet, enhanced packet blocks with
// nanosecond timestamps and the files' captured and original lengths,
// then the interface statistics blocks of the files read (their
// counters, cumulative since the agent started, as the files hold
// them; a file whose end the query did not reach gives none), in time
// order. An error after writing began leaves a valid pcapng of what was
// written.
//
// # Follow
//
// With Config.Follow the query goes on once the files are read: a
// followed .part is read up to the complete length its layout.PartTail
// (a goroutine per followed file) finds as the file grows, the next
// file once it is published, agents that appear are added (their
// streams share ReorderMem again). Reading and writing go in rounds:
// every stream reads what there is now (or until its window is full),
// then the least packet held is written while every other stream has a
// full window, has read a packet FollowDelay later, or is silent (read
// nothing for FollowDelay, and the packet is FollowDelay older than the
// clock); or while a packet held was read FollowDelay ago and no
// followed file is still being scanned. A packet older than one already
// written is written and counted in Result.Late, not ErrOutOfOrder.
// The output is flushed every round; the statistics blocks of files
// ended are written in the round that ended them. The context ending
// writes what is held and is no error (Result.Stopped "interrupted").
//
// # Threads
//
// With Config.Threads above 1 (the default: GOMAXPROCS), each agent's
// open compressed file is read ahead by a goroutine (read, decompressed, spliced
// to the index blocks selected) into at most four 256 KiB chunks, at
// most Threads goroutines reading at once, and Run's output is written
// by a goroutine from two 256 KiB buffers. Each agent's packets are
// parsed, filtered and put in order in its reorder window by a
// goroutine of its own (produce.go), which hands the merge batches of
// the packets its window releases; the merge stays in the query's
// goroutine. What a window releases depends on the agent's files and
// its share of ReorderMem alone, so the output is the same byte for
// byte whatever Threads. Follow is one goroutine.
//
// Memory is bounded by ReorderMem (and 1/32 of it in buffers kept for
// reuse) plus one reader (buffers and a decompressor) per selected
// agent, and with Threads above 1 1 MiB of read-ahead and the batches
// handed the merge (1/16 of its window) per agent, whatever the size
// of the result. Run is safe to call concurrently with different
// writers.
package query
