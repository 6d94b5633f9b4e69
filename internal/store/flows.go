package store

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/retention"
)

// Every data file gets a flow file beside it when Config.Flows is set
// (package flow, docs/flows.md): written while the file is written as
// <final name>.flows.part, renamed to <final name>.flows just before
// the data file is (publish, after its index), removed with the data
// file by retention and counted in its bytes. Like the index, it is a
// hint that costs the write path no sync and no error: a failure to
// write it drops it (`pcapsync index` rebuilds it), a crash leaves a
// .flows.part that repair removes with the .idx.part (repair.go: its
// records name the removed index's blocks; `pcapsync index` rebuilds
// both from the repaired data file), and a file cut back after a write
// error (abandon) loses its flow file.
//
// One flow.Table per agent is fed every packet as it is written, with
// the index block the packet is in (0 without an index), and lives
// across the agent's files: at a file's close Rotate writes a record of
// every flow still going (end "open") and the flows go on in the next
// file's records. Records ended are encoded at commits and appended to
// the flow file as the index's blocks are (at most every
// indexWriteInterval unless indexWriteBytes of them wait, and at
// close), so the write path costs at most one Table.Add per packet, and
// none for a packet of the last packet's flow that needs nothing but
// counting (summed in flow.Run, handed over once per run), and no
// allocation once the table has grown to the flows it holds.

// flowSettle hands the table what fr (flow.Run) summed of the
// same-flow packets the write path took (agentFile.write).
func (af *agentFile) flowSettle() { af.fr.Settle(af.ft) }

// flowStart begins the flow file of the file just opened.
func (af *agentFile) flowStart() {
	af.flLive, af.flBytes, af.flLast = false, 0, time.Time{}
	if !af.flOn {
		return
	}
	if af.ft != nil {
		af.flowSettle()
	}
	if af.ft == nil {
		t, err := flow.NewTable(&af.flCfg)
		if err != nil { // Config.Validate refused it already
			return
		}
		af.ft = t
	}
	af.ft.Clear()
	af.flEvicted = af.ft.Counters().Evicted
	af.flBuf = af.flEnc.AppendHeader(af.flBuf[:0], filepath.Base(af.path))
	af.flLive = true
}

// flowEncode moves the records the table ended to the bytes waiting
// for the flow file.
func (af *agentFile) flowEncode() {
	af.flowSettle()
	recs := af.ft.Records()
	for i := range recs {
		af.flBuf = af.flEnc.AppendRecord(af.flBuf, &recs[i])
	}
	if af.counters != nil {
		af.counters.FlowRecords.Add(uint64(len(recs)))
	}
	af.ft.Clear()
}

// flowCommit encodes the records ended so far and writes them when the
// index's pace says so.
func (af *agentFile) flowCommit() {
	if !af.flLive {
		return
	}
	af.flowEncode()
	if len(af.flBuf) > 0 {
		if now := time.Now(); now.Sub(af.flLast) >= indexWriteInterval || len(af.flBuf) >= indexWriteBytes {
			af.flLast = now
			af.flowWrite()
		}
	}
}

// flowFinish ends the flow file of the file being closed: a record of
// every flow still going, and the end record.
func (af *agentFile) flowFinish() {
	if !af.flLive {
		return
	}
	af.flowSettle()
	af.ft.Rotate()
	af.flowEncode()
	evicted := af.ft.Counters().Evicted - af.flEvicted
	if af.counters != nil {
		af.counters.FlowsEvicted.Add(evicted)
	}
	af.flBuf = af.flEnc.AppendEnd(af.flBuf, evicted)
	af.flowWrite()
	af.flLive = false
}

// flowWrite appends what waits to the flow file.
func (af *agentFile) flowWrite() {
	if err := appendFile(flow.Path(af.path+layout.PartSuffix), af.flBuf); err != nil {
		af.logErr("writing the flow file; the file is left without one (pcapsync index rebuilds it)", err)
		if af.counters != nil {
			af.counters.FlowErrors.Add(1)
		}
		af.flowDrop()
		return
	}
	n := int64(len(af.flBuf))
	af.flBytes += n
	af.flBuf = af.flBuf[:0]
	if af.ret != nil {
		af.ret.Note(retention.Event{Kind: retention.Wrote, Bytes: n})
	}
}

// flowDrop gives up the flow file of the open file and removes what was
// written of it. The table forgets the records of the file; its flows
// go on in the next file's.
func (af *agentFile) flowDrop() {
	if af.ft != nil {
		af.flowSettle()
		af.ft.Clear()
	}
	af.flBuf = af.flBuf[:0]
	if !af.flLive && af.flBytes == 0 {
		return
	}
	af.flLive = false
	af.flBytes = 0
	if af.path != "" {
		os.Remove(flow.Path(af.path + layout.PartSuffix))
	}
}

// flowAbandon drops the flow file of a file cut back (abandon): the
// table counted packets the cut removed, so its flows are forgotten.
func (af *agentFile) flowAbandon() {
	if af.ft != nil {
		af.flowSettle()
		af.ft.Flush()
	}
	af.flowDrop()
}

// publishFlows renames the flow file of part, a data file being
// published, to its final name: before the data file, so that a
// published data file never has an unpublished flow file. A failure
// leaves the file without one.
func publishFlows(part string) {
	publishBeside(flow.Path(part), flow.Path(strings.TrimSuffix(part, layout.PartSuffix)))
}
