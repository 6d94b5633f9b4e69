package flowtest

// This file writes flow files for the readers' tests from data files
// written here, with a table that goes on across files as the store's
// does; WriteStore (store.go) writes through the store itself, which
// TestCommunityIDStoreWritten uses to hold writer and readers to the
// same block numbering.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
)

// BlockBytes is the index block size: it makes small index blocks, so that flows span several.
const BlockBytes = 4096

// WriteFlowFiles builds the index (index.Build) and the flow file of
// each of one agent's data files, in the order given (the store's), with
// one flow table across them rotated at each file's end, as the store
// does: every packet is added with the index block that holds it.
func WriteFlowFiles(t testing.TB, paths []string, cfg *flow.Config) {
	t.Helper()
	tab, err := flow.NewTable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range paths {
		b, err := index.Build(context.Background(), p, BlockBytes)
		if err != nil {
			t.Fatalf("index %s: %v", p, err)
		}
		if err := index.WriteFile(p, b); err != nil {
			t.Fatal(err)
		}
		ix, err := index.Parse(b, false)
		if err != nil {
			t.Fatal(err)
		}
		addFile(t, tab, p, ix)
		tab.Rotate()
		var enc flow.Encoder
		out := enc.AppendHeader(nil, strings.TrimSuffix(filepath.Base(p), layout.PartSuffix))
		for i := range tab.Records() {
			out = enc.AppendRecord(out, &tab.Records()[i])
		}
		out = enc.AppendEnd(out, tab.Counters().Evicted)
		tab.Clear()
		if err := os.WriteFile(flow.Path(p), out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// addFile adds every packet of the data file at p to tab, each with the
// number of the index block holding it.
func addFile(t testing.TB, tab *flow.Table, p string, ix *index.Index) {
	t.Helper()
	blk := 0
	capturetest.EachPacket(t, p, func(r *pcapfile.Reader, pkt *pcapfile.Packet) {
		end := r.Offset()
		for blk < len(ix.All) && (ix.All[blk].RawEnd < end || ix.All[blk].Packets == 0) {
			blk++
		}
		if blk == len(ix.All) || ix.All[blk].Raw >= end {
			t.Fatalf("%s: packet ending at %d in no index block", p, end)
		}
		lt := uint32(r.Interfaces()[pkt.Interface].LinkType)
		tab.Add(uint32(pkt.Interface), lt, pkt.Timestamp, pkt.OrigLen, pkt.Data, uint32(blk))
	})
}
