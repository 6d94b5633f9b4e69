package flow

// End says why a record ended.
type End uint8

// Ends of a record.
const (
	// EndOpen: the flow was still open when its data file closed (at
	// rotation or shutdown); it goes on in the next file, as a record
	// with the same Community ID and the next Part.
	EndOpen End = iota
	// EndFIN: both sides sent a FIN.
	EndFIN
	// EndRST: a side sent a RST.
	EndRST
	// EndIdle: no packet for the idle timeout.
	EndIdle
	// EndSplit: the record reached Config.SplitPackets packets; the flow
	// goes on in a record with the next Part.
	EndSplit
	// EndEvicted: flushed early because the table held Config.MaxFlows
	// flows and a new one came (the least recently active went).
	EndEvicted
	endCount
)

var endNames = [endCount]string{"open", "fin", "rst", "idle", "split", "evicted"}

func (e End) String() string {
	if e < endCount {
		return endNames[e]
	}
	return "unknown"
}

// MaxBlockRuns is the number of runs of index blocks a record holds.
const MaxBlockRuns = 4

// BlockRun is a run of index blocks First..Last (inclusive), numbered
// as the data file's index numbers them (0 the first block).
type BlockRun struct{ First, Last uint32 }

// Record flags.
const (
	// RecordSYN: the initiator was decided by a TCP SYN (without ACK)
	// or SYN-ACK; without it the initiator is the first packet's sender.
	RecordSYN uint8 = 1 << iota
)

// Record is one flow, or one part of a flow, as written to a data file's
// flow file: the key with the initiator first, and what its packets were.
// Index [0] of the pairs counts the packets sent by the initiator (Key.Src),
// [1] those sent by the responder.
type Record struct {
	Key         Key
	First, Last int64 // the earliest and latest packet time (Unix ns)
	Packets     [2]uint64
	Bytes       [2]uint64 // wire length (the packets' original lengths)
	Captured    [2]uint64 // captured length
	TCPFlags    [2]uint8  // the TCP flags of the packets, OR-ed
	End         End
	Flags       uint8  // RecordSYN
	Part        uint32 // 0 for a flow's first record, then +1 per split or file
	// Blocks are the index blocks that hold the record's packets (a
	// superset when they are more scattered than MaxBlockRuns runs):
	// Blocks[:NRuns], in order, not touching.
	NRuns  uint8
	Blocks [MaxBlockRuns]BlockRun
}

// TotalPackets returns the packets of both directions.
func (r *Record) TotalPackets() uint64 { return r.Packets[0] + r.Packets[1] }

// TotalBytes returns the wire bytes of both directions.
func (r *Record) TotalBytes() uint64 { return r.Bytes[0] + r.Bytes[1] }

// Runs returns the runs of blocks that hold the record's packets.
func (r *Record) Runs() []BlockRun { return r.Blocks[:min(int(r.NRuns), MaxBlockRuns)] }

// addBlock notes that a packet of the record is in block b, keeping the
// runs sorted and merging the two closest when there are more than
// MaxBlockRuns.
func (r *Record) addBlock(b uint32) {
	n := int(r.NRuns)
	if n > 0 {
		last := &r.Blocks[n-1]
		if b >= last.First && b <= last.Last {
			return
		}
		if uint64(b) == uint64(last.Last)+1 {
			last.Last = b
			return
		}
	}
	i := 0
	for i < n && r.Blocks[i].Last < b {
		i++
	}
	if i < n && r.Blocks[i].First <= b {
		return // inside run i
	}
	// Insert {b, b} at i, then merge what touches.
	var tmp [MaxBlockRuns + 1]BlockRun
	copy(tmp[:i], r.Blocks[:i])
	tmp[i] = BlockRun{b, b}
	copy(tmp[i+1:], r.Blocks[i:n])
	n++
	out := 0
	for j := 0; j < n; j++ {
		if out > 0 && uint64(tmp[j].First) <= uint64(tmp[out-1].Last)+1 {
			tmp[out-1].Last = max(tmp[out-1].Last, tmp[j].Last)
			continue
		}
		tmp[out] = tmp[j]
		out++
	}
	n = out
	if n > MaxBlockRuns {
		best := 0
		for j := 1; j < n-1; j++ {
			if tmp[j+1].First-tmp[j].Last < tmp[best+1].First-tmp[best].Last {
				best = j
			}
		}
		tmp[best].Last = tmp[best+1].Last
		copy(tmp[best+1:], tmp[best+2:n])
		n--
	}
	copy(r.Blocks[:], tmp[:n])
	r.NRuns = uint8(n)
}
