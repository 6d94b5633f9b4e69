package bench

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// LatencyConfig describes a latency run. The zero value of each field
// means its default.
type LatencyConfig struct {
	Exe      string        // the pcapsync binary to run; required
	Rate     int           // packets per second; 0 means 1000
	Duration time.Duration // sending time; 0 means 10s
	Flush    time.Duration // the agent's --flush-interval; 0 means its default, 50ms
	// CollectorArgs are more collector flags (e.g. --fsync never).
	CollectorArgs []string
}

// LatencyResult holds the latencies from packet timestamp to the packet
// being in a file, for pcapsync and for tcpdump -U -w on the same traffic.
type LatencyResult struct {
	Flush     time.Duration
	Sent      int
	Pcapsync  []time.Duration
	Tcpdump   []time.Duration
	PollEvery time.Duration
}

// WriteLatency prints p50, p99 and max for both, the goal, and the ratio.
func WriteLatency(w io.Writer, r LatencyResult, markdown bool) error {
	row := func(name string, ds []time.Duration) []string {
		return []string{name, strconv.Itoa(len(ds)), fmtDur(percentile(ds, 50)), fmtDur(percentile(ds, 99)), fmtDur(percentile(ds, 100))}
	}
	goal := r.Flush + 5*time.Millisecond
	ours, theirs := percentile(r.Pcapsync, 99), percentile(r.Tcpdump, 99)
	met := "met"
	if ours >= goal {
		met = "NOT MET"
	}
	rows := [][]string{
		{"capture to file", "packets", "p50", "p99", "max"},
		row("pcapsync agent -> collector (flush "+r.Flush.String()+")", r.Pcapsync),
		row("tcpdump -U -w on the same interface", r.Tcpdump),
		{"pcapsync p99 goal < flush + 5 ms = " + fmtDur(goal), "", "", met, ""},
		{fmt.Sprintf("ratio of p99, pcapsync / tcpdump: %.1f", float64(ours)/float64(max(theirs, 1))), "", "", "", ""},
	}
	return table(w, rows, markdown)
}

// tailer reads a growing pcapng (as the collector writes it: little
// endian, nanosecond timestamps) or nanosecond pcap file and records,
// for each packet as it becomes readable, now minus its timestamp.
type tailer struct {
	path string
	f    *os.File
	off  int64
	buf  []byte
	pcap bool // classic pcap, after its 24-byte header
	hdr  bool
	lat  []time.Duration
	err  error
	tmp  [1 << 16]byte
}

func (t *tailer) poll(now time.Time) {
	if t.path == "" || t.err != nil {
		return
	}
	if t.f == nil {
		f, err := os.Open(t.path)
		if err != nil {
			return // not created yet
		}
		t.f = f
	}
	for {
		n, err := t.f.ReadAt(t.tmp[:], t.off)
		t.off += int64(n)
		t.buf = append(t.buf, t.tmp[:n]...)
		if n < len(t.tmp) || err != nil {
			break
		}
	}
	t.parse(now.UnixNano())
}

func (t *tailer) parse(now int64) {
	b := t.buf
	if !t.hdr {
		if len(b) < 4 {
			return
		}
		switch binary.LittleEndian.Uint32(b) {
		case 0xa1b23c4d:
			if len(b) < 24 {
				return
			}
			t.pcap, b = true, b[24:]
		case 0x0A0D0D0A:
		default:
			t.err = fmt.Errorf("%s: not a little-endian pcapng or nanosecond pcap file", t.path)
			return
		}
		t.hdr = true
	}
	for {
		if t.pcap {
			if len(b) < 16 {
				break
			}
			incl := int(binary.LittleEndian.Uint32(b[8:]))
			if len(b) < 16+incl {
				break
			}
			ts := int64(binary.LittleEndian.Uint32(b))*1e9 + int64(binary.LittleEndian.Uint32(b[4:]))
			t.lat = append(t.lat, time.Duration(now-ts))
			b = b[16+incl:]
			continue
		}
		if len(b) < 12 {
			break
		}
		n := int(binary.LittleEndian.Uint32(b[4:]))
		if n < 12 || len(b) < n {
			break
		}
		if binary.LittleEndian.Uint32(b) == 6 && n >= 32 { // EPB, ns resolution
			ts := int64(uint64(binary.LittleEndian.Uint32(b[12:]))<<32 | uint64(binary.LittleEndian.Uint32(b[16:])))
			t.lat = append(t.lat, time.Duration(now-ts))
		}
		b = b[n:]
	}
	t.buf = append(t.buf[:0], b...)
}
