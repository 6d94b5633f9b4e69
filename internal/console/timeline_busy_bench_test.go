package console

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/timeline"
)

// Shape of BenchmarkTimelineBusy's root: per agent a file an hour of
// busyBlocks blocks of busyBlockBytes (512 KiB, the default: about
// 2.3 Mbit/s), each block's filter of busyKeys keys.
const (
	busyBlocks     = 2000
	busyBlockBytes = 512 << 10
	busyFlows      = 50 // packets of other flows per block: a filter of about 300 bytes, as the query benchmark's root's
	busyHead       = 48 // section header and one interface
)

// busyData writes, at path, a plain data file of busyBlocks blocks of
// busyBlockBytes from t0 (ns), a block every hour/busyBlocks, sparse:
// of each block only its first packet is written (the one index.Open
// probes), the rest a hole; then the interface's statistics (drops).
// It returns the file's index (named "x") as index.Builder writes it,
// its filters holding its first packet's keys and busyFlows flows'.
func busyData(tb testing.TB, path string, t0 int64) []byte {
	le := binary.LittleEndian
	b := le.AppendUint32(nil, 0x0A0D0D0A)
	b = le.AppendUint32(b, 28)
	b = le.AppendUint32(b, 0x1A2B3C4D)
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, ^uint64(0))
	b = le.AppendUint32(b, 28)
	b = le.AppendUint32(b, 1)
	b = le.AppendUint32(b, 20)
	b = le.AppendUint32(b, gen.LinkTypeEthernet)
	b = le.AppendUint32(b, 0)
	b = le.AppendUint32(b, 20)
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		tb.Fatal(err)
	}
	var bl index.Builder
	bl.Reset("x", index.CodecNone, 1, busyBlockBytes, busyHead, busyHead)
	span := int64(time.Hour) / busyBlocks
	frame := make([]byte, 100)
	for i := range busyBlocks {
		raw := int64(busyHead + i*busyBlockBytes)
		first := t0 + int64(i)*span
		gen.Frame(frame, gen.LinkTypeEthernet, 1, uint64(i))
		epb := le.AppendUint32(nil, 6)
		epb = le.AppendUint32(epb, uint32(32+len(frame)))
		epb = le.AppendUint32(epb, 0)
		epb = le.AppendUint32(epb, uint32(uint64(first)>>32))
		epb = le.AppendUint32(epb, uint32(first))
		epb = le.AppendUint32(epb, uint32(len(frame)))
		epb = le.AppendUint32(epb, uint32(len(frame)))
		epb = append(epb, frame...)
		epb = le.AppendUint32(epb, uint32(32+len(frame)))
		if _, err := f.WriteAt(epb, raw); err != nil {
			tb.Fatal(err)
		}
		bl.Add(gen.LinkTypeEthernet, first, frame)
		for k := range busyFlows {
			fr := gen.Frame(make([]byte, 100), gen.LinkTypeEthernet, 1, uint64(k))
			fr[14+19] = byte(k)                                    // the destination address
			binary.BigEndian.PutUint16(fr[14+22:], uint16(1000+k)) // and port
			bl.Add(gen.LinkTypeEthernet, first+span*int64(k+1)/(busyFlows+2), fr)
		}
		if i < busyBlocks-1 {
			bl.EndBlock(raw+busyBlockBytes, 1, raw+busyBlockBytes)
		}
	}
	end := int64(busyHead + busyBlocks*busyBlockBytes)
	isb := le.AppendUint32(nil, 5)
	isb = le.AppendUint32(isb, 40)
	isb = le.AppendUint32(isb, 0)
	ts := uint64(t0 + int64(time.Hour) - 1)
	isb = le.AppendUint32(isb, uint32(ts>>32))
	isb = le.AppendUint32(isb, uint32(ts))
	isb = le.AppendUint16(isb, 7)
	isb = le.AppendUint16(isb, 8)
	isb = le.AppendUint64(isb, uint64(t0/int64(time.Hour)%24))
	isb = le.AppendUint32(isb, 0)
	isb = le.AppendUint32(isb, 40)
	if _, err := f.WriteAt(isb, end); err != nil {
		tb.Fatal(err)
	}
	size := end + int64(len(isb))
	bl.Finish(end, 1, size, size)
	return slices.Clone(bl.Pending())
}

// BenchmarkTimelineBusy: BuildTimeline of 24 h of
// PCAPSYNC_BENCH_AGENTS agents (default 4, so that the test suite's
// one run of every benchmark stays small; BENCHMARKS.md's figures are
// of 100) at a busy volume: a file an hour per agent of
// 2000 blocks of 512 KiB (4.8 million blocks, 2.4 TB of packets
// described, about 1.4 GB of index), alternating, in rounds
// (PCAPSYNC_BENCH_ROUNDS, default 1), from the timeline summaries
// (FILE.timeline, index.OpenBins: now) and from the indexes only
// (index.OpenSummary: before the summaries), checking the two equal. The data files are sparse (only the packet
// index.Open probes of each block is written) and hard links of 24
// files; each agent's indexes are its own. BENCHMARKS.md, Issue 29.
func BenchmarkTimelineBusy(b *testing.B) {
	agents, rounds := 4, 1
	if s := os.Getenv("PCAPSYNC_BENCH_AGENTS"); s != "" {
		agents, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("PCAPSYNC_BENCH_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	dir := b.TempDir()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var idx [][]byte
	var datas []string
	for hour := range 24 {
		p := filepath.Join(dir, fmt.Sprintf("data%02d", hour))
		idx = append(idx, busyData(b, p, base.Add(time.Duration(hour)*time.Hour).UnixNano()))
		datas = append(datas, p)
	}
	var indexBytes, binsBytes int64
	for ai := range agents {
		name := "agent" + strconv.Itoa(ai)
		ad := filepath.Join(dir, name)
		if err := os.Mkdir(ad, 0o750); err != nil {
			b.Fatal(err)
		}
		for hour := range 24 {
			file := name + "_" + base.Add(time.Duration(hour)*time.Hour).Format("20060102T150405.000Z") + ".pcapng"
			if err := os.Link(datas[hour], filepath.Join(ad, file)); err != nil {
				b.Fatal(err)
			}
			ix, err := index.Parse(idx[hour], false)
			if err != nil {
				b.Fatal(err)
			}
			ix.Name = file
			enc := ix.Append(nil)
			indexBytes += int64(len(enc))
			if err := os.WriteFile(index.Path(filepath.Join(ad, file)), enc, 0o640); err != nil {
				b.Fatal(err)
			}
			// The timeline summary the store writes at close.
			st, err := os.Stat(datas[hour])
			if err != nil {
				b.Fatal(err)
			}
			bins, err := index.BuildBins(ix, st.Size(), int64(len(enc)))
			if err != nil {
				b.Fatal(err)
			}
			binsBytes += int64(len(bins))
			if err := os.WriteFile(index.BinsPath(filepath.Join(ad, file)), bins, 0o640); err != nil {
				b.Fatal(err)
			}
		}
	}
	ctx := context.Background()
	// day builds the day's timeline with the summaries (bins) or from
	// the indexes only (index.OpenSummary: what the timeline read
	// before the summaries).
	day := func(bins bool) (time.Duration, Timeline) {
		if !bins {
			timeline.OpenBins = nil
			defer func() { timeline.OpenBins = index.OpenBins }()
		}
		start := time.Now()
		tl, err := BuildTimeline(ctx, dir, nil, base, base.Add(24*time.Hour), timeline.DefaultStep(24*time.Hour))
		took := time.Since(start)
		if err != nil || len(tl.Agents) != agents || tl.Coverage.Files != 24*agents || tl.Coverage.Unindexed != 0 ||
			sumPtr(tl.Agents[0].Packets) != 24*busyBlocks*(1+busyFlows) || sum(tl.Agents[0].Drops) != 23 ||
			bins != (tl.Coverage.Summaries == 24*agents) {
			b.Fatalf("the day's timeline: %v, %d agents, coverage %+v, packets %d drops %d", err, len(tl.Agents), tl.Coverage, sumPtr(tl.Agents[0].Packets), sum(tl.Agents[0].Drops))
		}
		return took, tl
	}
	b.Logf("%d agents, %d files, %d blocks, %d bytes of index, %d bytes of timeline summaries", agents, 24*agents, 24*agents*busyBlocks, indexBytes, binsBytes)
	var bins, sums []time.Duration
	for b.Loop() {
		for r := range rounds {
			o, tlo := day(false)
			s, tl := day(true)
			js, _ := json.Marshal(tl.Agents)
			jo, _ := json.Marshal(tlo.Agents)
			if !bytes.Equal(js, jo) || tl.Coverage.Blocks != tlo.Coverage.Blocks {
				b.Fatal("the timelines of the summaries and of the indexes differ")
			}
			bins, sums = append(bins, s), append(sums, o)
			b.Logf("round %d: timeline summaries %v (bytes read %d), index summaries %v (%d)", r+1, s, tl.Coverage.IndexRead, o, tlo.Coverage.IndexRead)
		}
	}
	slices.Sort(bins)
	slices.Sort(sums)
	b.Logf("timeline summaries: median %v, range %v to %v; index summaries: median %v, range %v to %v",
		bins[len(bins)/2], bins[0], bins[len(bins)-1], sums[len(sums)/2], sums[0], sums[len(sums)-1])
	b.ReportMetric(float64(bins[len(bins)/2].Milliseconds()), "bins-ms")
	b.ReportMetric(float64(sums[len(sums)/2].Milliseconds()), "index-ms")
}
