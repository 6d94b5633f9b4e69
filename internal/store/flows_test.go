package store

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/flow/flowfile"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/testutil/capturetest"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// flowBatch is batch seq of n packets of 9 TCP conversations (client
// 10.0.1.c:2000+c, server 192.0.2.9:80), a third of them the server's
// replies (every third round), the first of each a SYN, conversation 8 ended by a RST at
// packet 300; every 25th packet on tun0 (raw IP). Packet k = first+i
// at ixTS0 + k*1000 ns.
func flowBatch(seq uint64, first, n int) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		k := first + i
		c := k % 9
		p := tcpFrame(14+20+20+100+k%50, 6, []byte{10, 0, 1, byte(c)}, []byte{192, 0, 2, 9}, uint16(2000+c), 80, k/9%3 == 2)
		ip := p[14:]
		switch {
		case k < 9:
			ip[33] = flow.TCPSyn
		case k == 300-300%9+8:
			ip[33] = flow.TCPRst
		default:
			ip[33] = flow.TCPAck
		}
		iface := uint32(0)
		if k%25 == 0 {
			iface, p = 1, ip
		}
		e.Append(int64(ixTS0+k*1000), iface, uint32(len(p)+4), p)
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

// tcpFrame returns an Ethernet frame of size bytes of IPv4 (no options)
// of protocol proto from cli:cport to srv:sport, or back (reply), with
// a TCP header's data offset (20 bytes) and no flags.
func tcpFrame(size int, proto byte, cli, srv []byte, cport, sport uint16, reply bool) []byte {
	p := make([]byte, size)
	binary.BigEndian.PutUint16(p[12:], 0x0800)
	ip := p[14:]
	ip[0], ip[9] = 0x45, proto
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	if reply {
		cli, srv, cport, sport = srv, cli, sport, cport
	}
	copy(ip[12:], cli)
	copy(ip[16:], srv)
	binary.BigEndian.PutUint16(ip[20:], cport)
	binary.BigEndian.PutUint16(ip[22:], sport)
	ip[32] = 5 << 4
	return p
}

// writeFlowBatches writes and commits flowBatch 1..n of per packets.
func writeFlowBatches(t *testing.T, s *testSession, n uint64, per int) {
	t.Helper()
	for seq := uint64(1); seq <= n; seq++ {
		if _, err := s.Batch(0, flowBatch(seq, int(seq-1)*per, per)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// agentDataFiles returns the data files of agent dir in name order.
func agentDataFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if layout.IsDataFile(filepath.Base(dir), e.Name()) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	return out
}

// wantFlows feeds table the packets of the data files of dir, in order,
// with the blocks of their indexes, and returns the records of each
// file as the store writes them.
func wantFlows(t *testing.T, table *flow.Table, files []string) [][]flow.Record {
	t.Helper()
	return wantFlowsOf(t, table, files, hello("", 0).Interfaces)
}

// wantFlowsOf is wantFlows for an agent of interfaces ifcs.
func wantFlowsOf(t *testing.T, table *flow.Table, files []string, ifcs []wire.Interface) [][]flow.Record {
	t.Helper()
	agent := filepath.Base(filepath.Dir(files[0]))
	links, ifaces := map[string]uint32{}, map[string]uint32{}
	for i, ifc := range ifcs {
		links[agent+":"+ifc.Name], ifaces[agent+":"+ifc.Name] = uint32(ifc.LinkType), uint32(i)
	}
	var out [][]flow.Record
	for _, path := range files {
		ix, err := index.Open(path)
		if err != nil {
			t.Fatalf("index of %s: %v", path, err)
		}
		pkts := capturetest.ReadFile(t, path)
		block, left := 0, 0
		if len(ix.All) > 0 {
			left = ix.All[0].Packets
		}
		for _, p := range pkts {
			for left == 0 && block+1 < len(ix.All) {
				block++
				left = ix.All[block].Packets
			}
			left--
			table.Add(ifaces[p.Iface], links[p.Iface], p.TS, p.OrigLen, p.Data, uint32(block))
		}
		table.Rotate()
		recs := slices.Clone(table.Records())
		for i := range recs {
			clear(recs[i].Blocks[recs[i].NRuns:]) // what a table leaves past its runs is not written
		}
		out = append(out, recs)
		table.Clear()
	}
	return out
}

// TestFlowsWritten: with Flows, every data file, owned or shared, gets
// a flow file published with it (no .part left), whose records are
// those a flow.Table fed the same packets with the blocks of the file's
// index writes, flows going on across rotations; retention counts its
// bytes with its data file's.
func TestFlowsWritten(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "owned", true: "shared"}[shared], func(t *testing.T) {
			cfg := Config{Flows: true, IndexBlock: MinIndexBlock, RotateSize: 64 << 10, Dir: t.TempDir()}
			var c *testCore
			if shared {
				c = newShared(t, cfg.Dir, cfg)
			} else {
				c = newCore(t, cfg)
				t.Cleanup(func() { c.Close() })
			}
			s, _, err := c.Begin(hello("fl", 1), func() {})
			if err != nil {
				t.Fatal(err)
			}
			const batches, per = 100, 20
			writeFlowBatches(t, s, batches, per)
			s.End(true)
			dir := filepath.Join(c.Dir(), "fl")
			files := agentDataFiles(t, dir)
			if len(files) < 3 {
				t.Fatalf("%d data files, want rotations", len(files))
			}
			table, _ := flow.NewTable(nil)
			want := wantFlows(t, table, files)
			var records uint64
			for i, path := range files {
				if _, err := os.Stat(flow.Path(path + layout.PartSuffix)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("the flow file's .part is left: %v", err)
				}
				b, err := os.ReadFile(flow.Path(path))
				if err != nil {
					t.Fatal(err)
				}
				f, err := flow.Parse(b)
				if err != nil || !f.Final || f.Name != filepath.Base(path) {
					t.Fatalf("%s: %v, final %v, named %q", filepath.Base(path), err, f.Final, f.Name)
				}
				if !slices.Equal(f.Records, want[i]) {
					for j := range min(len(f.Records), len(want[i])) {
						if f.Records[j] != want[i][j] {
							t.Fatalf("%s: record %d of %d\n%+v\nwant (of %d)\n%+v", filepath.Base(path), j, len(f.Records), f.Records[j], len(want[i]), want[i][j])
						}
					}
					t.Fatalf("%s: %d records, want %d", filepath.Base(path), len(f.Records), len(want[i]))
				}
				records += uint64(len(f.Records))
				st, _ := os.Stat(path)
				ist, _ := os.Stat(index.Path(path))
				for _, rf := range c.ret.Files("fl") {
					if rf.Name == filepath.Base(path) && rf.Bytes != st.Size()+ist.Size()+int64(len(b)) {
						t.Errorf("%s: retention counts %d bytes, want data %d + index %d + flows %d", rf.Name, rf.Bytes, st.Size(), ist.Size(), len(b))
					}
				}
			}
			if got := c.Counters.FlowRecords.Load(); got != records {
				t.Errorf("FlowRecords %d, want %d", got, records)
			}
			t.Logf("%d files, %d records", len(files), records)
		})
	}
}

// TestFlowsOff: without Flows no flow file is written.
func TestFlowsOff(t *testing.T) {
	c := newCore(t, Config{})
	t.Cleanup(func() { c.Close() })
	s, _, err := c.Begin(hello("nf", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, s, 1, 3)
	s.End(true)
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), "nf"))
	for _, e := range ents {
		if strings.Contains(e.Name(), flow.Suffix) {
			t.Fatalf("flow file %s written with Flows off", e.Name())
		}
	}
}

// TestFlowsEvicted: a flow table bound (Config.FlowTable.MaxFlows)
// below the conversations going on evicts, and the evictions are
// counted in the files' end records and in FlowsEvicted.
func TestFlowsEvicted(t *testing.T) {
	c := newCore(t, Config{Flows: true, FlowTable: flow.Config{MaxFlows: 4}, RotateSize: 64 << 10})
	t.Cleanup(func() { c.Close() })
	s, _, err := c.Begin(hello("ev", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeFlowBatches(t, s, 40, 20)
	s.End(true)
	var evicted uint64
	for _, path := range agentDataFiles(t, filepath.Join(c.Dir(), "ev")) {
		b, _ := os.ReadFile(flow.Path(path))
		f, err := flow.Parse(b)
		if err != nil || !f.Final {
			t.Fatalf("%s: %v, final %v", path, err, f.Final)
		}
		evicted += f.Evicted
	}
	if got := c.Counters.FlowsEvicted.Load(); evicted == 0 || got != evicted {
		t.Fatalf("FlowsEvicted %d, the files' end records %d, want equal and not 0", got, evicted)
	}
}

// crashWithFlows writes 20 committed batches of flowBatch with Flows
// and an index, then crashes (the Store dropped without Close), and
// returns the .part left.
func crashWithFlows(t *testing.T, dir string) string {
	t.Helper()
	every := indexWriteInterval
	indexWriteInterval = 0 // every commit writes: a crash leaves a flow file
	t.Cleanup(func() { indexWriteInterval = every })
	c := newCore(t, Config{Dir: dir, Flows: true, IndexBlock: MinIndexBlock})
	s, _, err := c.Begin(hello("fc", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeFlowBatches(t, s, 20, 20)
	part := filepath.Join(dir, "fc", filepath.Base(c.writers["fc"].file.path)+layout.PartSuffix)
	b, err := os.ReadFile(flow.Path(part))
	if err != nil {
		t.Fatalf("no flow file beside %s: %v", part, err)
	}
	if f, err := flow.Parse(b); err != nil || f.Final {
		t.Fatalf("flow file while written: %v, final %v, %d records", err, f.Final, len(f.Records))
	}
	af := &c.writers["fc"].file
	af.bw.Flush()
	af.f.Close() // the process is gone
	c.die()
	return part
}

// TestFlowsCrash: a crash leaves the flow file as .part (its records so
// far, no end record); the repair of its data file removes it with the
// index, whose block numbers it uses.
func TestFlowsCrash(t *testing.T) {
	dir := t.TempDir()
	part := crashWithFlows(t, dir)
	c := newCore(t, Config{Dir: dir, Flows: true, IndexBlock: MinIndexBlock}) // repairs
	t.Cleanup(func() { c.Close() })
	ents, _ := os.ReadDir(filepath.Join(dir, "fc"))
	if len(ents) != 1 || ents[0].Name()+layout.PartSuffix != filepath.Base(part) {
		t.Fatalf("after repair: %v, want only the published data file", ents)
	}
}

// TestFlowsRebuilt: the flow file rebuilt from a data file (pcapsync
// index: flowfile.RebuildDir) is byte for byte the one the store wrote
// live for a file of one agent session, committed after every batch
// (the index rebuilt then has the live index's blocks); after a crash
// and repair, it is rebuilt with the index, its records those of a
// table fed the repaired file's packets with that index's blocks.
func TestFlowsRebuilt(t *testing.T) {
	t.Run("live", func(t *testing.T) {
		c := newCore(t, Config{Flows: true, IndexBlock: MinIndexBlock})
		t.Cleanup(func() { c.Close() })
		s, _, err := c.Begin(hello("lv", 1), func() {})
		if err != nil {
			t.Fatal(err)
		}
		writeFlowBatches(t, s, 50, 20)
		s.End(true)
		path := agentDataFiles(t, filepath.Join(c.Dir(), "lv"))[0]
		live, err := os.ReadFile(flow.Path(path))
		if err != nil {
			t.Fatal(err)
		}
		os.Remove(flow.Path(path))
		rep, err := flowfile.RebuildDir(context.Background(), c.Dir(), MinIndexBlock)
		if err != nil || rep.Sidecars != 1 || rep.Valid != 1 {
			t.Fatalf("RebuildDir: %+v, %v", rep, err)
		}
		rebuilt, _ := os.ReadFile(flow.Path(path))
		if !bytes.Equal(rebuilt, live) {
			t.Fatalf("rebuilt flow file (%d bytes) differs from the live one (%d bytes)", len(rebuilt), len(live))
		}
		if rep, _ := flowfile.RebuildDir(context.Background(), c.Dir(), MinIndexBlock); rep.Sidecars != 0 || rep.Valid != 1 {
			t.Fatalf("second RebuildDir did more: %+v", rep)
		}
	})
	t.Run("after crash", func(t *testing.T) {
		dir := t.TempDir()
		crashWithFlows(t, dir)
		c := newCore(t, Config{Dir: dir, Flows: true, IndexBlock: MinIndexBlock}) // repairs
		t.Cleanup(func() { c.Close() })
		rep, err := flowfile.RebuildDir(context.Background(), dir, MinIndexBlock)
		if err != nil || rep.Sidecars != 1 || rep.Built != 1 {
			t.Fatalf("RebuildDir: %+v, %v", rep, err)
		}
		files := agentDataFiles(t, filepath.Join(dir, "fc"))
		table, _ := flow.NewTable(nil)
		want := wantFlows(t, table, files)
		f, err := flowfile.Read(files[0])
		if err != nil || !f.Final || !slices.Equal(f.Records, want[0]) {
			t.Fatalf("rebuilt flow file: %v, final %v, %d records, want %d", err, f != nil && f.Final, len(f.Records), len(want[0]))
		}
	})
}

// TestFlowsHostile: a flow file that is a link (to a valid flow file
// elsewhere), damaged, cut, or over flowfile.MaxFileBytes is not
// trusted (flowfile.Sound), and RebuildDir replaces it without
// following or reading it whole; the link's target is left as it was.
func TestFlowsHostile(t *testing.T) {
	c := newCore(t, Config{Flows: true, IndexBlock: MinIndexBlock})
	t.Cleanup(func() { c.Close() })
	s, _, err := c.Begin(hello("ho", 1), func() {})
	if err != nil {
		t.Fatal(err)
	}
	writeBatches(t, s, 1, 5)
	s.End(true)
	path := agentDataFiles(t, filepath.Join(c.Dir(), "ho"))[0]
	good, err := os.ReadFile(flow.Path(path))
	if err != nil || !flowfile.Sound(path) {
		t.Fatalf("the flow file written: %v, sound %v", err, flowfile.Sound(path))
	}
	elsewhere := filepath.Join(t.TempDir(), "target.flows")
	tests := []struct {
		name  string
		plant func(fp string) error
	}{
		{"link", func(fp string) error {
			if err := os.WriteFile(elsewhere, good, 0o600); err != nil {
				return err
			}
			return os.Symlink(elsewhere, fp)
		}},
		{"damaged", func(fp string) error {
			b := bytes.Clone(good)
			b[len(b)/2] ^= 1
			return os.WriteFile(fp, b, 0o640)
		}},
		{"cut", func(fp string) error { return os.WriteFile(fp, good[:len(good)-3], 0o640) }},
		{"oversize", func(fp string) error {
			if err := os.WriteFile(fp, good, 0o640); err != nil {
				return err
			}
			return os.Truncate(fp, flowfile.MaxFileBytes+1) // sparse
		}},
		{"directory", func(fp string) error { return os.Mkdir(fp, 0o750) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fp := flow.Path(path)
			os.RemoveAll(fp)
			if err := tt.plant(fp); err != nil {
				t.Fatal(err)
			}
			if flowfile.Sound(path) {
				t.Fatal("a planted flow file trusted")
			}
			rep, _ := flowfile.RebuildDir(context.Background(), c.Dir(), MinIndexBlock)
			if tt.name == "directory" {
				if rep.Failed != 1 {
					t.Fatalf("RebuildDir over a directory: %+v", rep)
				}
				return
			}
			if rep.Sidecars != 1 || !flowfile.Sound(path) {
				t.Fatalf("RebuildDir: %+v, sound %v", rep, flowfile.Sound(path))
			}
			if st, err := os.Lstat(fp); err != nil || !st.Mode().IsRegular() {
				t.Fatalf("the rebuilt flow file: %v", err)
			}
			if b, _ := os.ReadFile(elsewhere); tt.name == "link" && !bytes.Equal(b, good) {
				t.Fatal("the link's target was written")
			}
		})
	}
}

// runBatch is batch seq of n packets of 3 conversations (TCP, UDP and
// SCTP between 10.0.2.1 and 192.0.2.7) in runs of 4 packets or more, on
// two Ethernet interfaces with the same headers: within a run a packet
// may be the reply, go on the other interface, be captured short of its
// TCP flags, or carry a SYN, FIN or RST. Packet k = first+i at ixTS0 +
// k*1000 ns, every 97th a microsecond back.
func runBatch(seq uint64, first, n int) []byte {
	var e wire.BatchEncoder
	e.Reset(nil)
	for i := range n {
		k := first + i
		h := uint32(k) * 2654435761           // a hash of k: the packet's choices
		run := uint32(k/4) * 2654435761 >> 28 // a conversation for 4 packets, often the same as the last 4
		proto := []byte{6, 17, 132}[run%3]
		p := tcpFrame(14+20+20+60+k%50, proto, []byte{10, 0, 2, 1}, []byte{192, 0, 2, 7}, uint16(3000+run%3), 443, h>>8%5 == 0)
		ip := p[14:]
		ip[33] = flow.TCPAck | byte(h>>12%2)<<3 // and now and then PSH
		if h>>16%40 == 0 {
			ip[33] = []byte{flow.TCPSyn, flow.TCPSyn | flow.TCPAck, flow.TCPFin | flow.TCPAck, flow.TCPRst}[h>>24%4]
		}
		orig := uint32(len(p))
		switch h >> 20 % 11 {
		case 0:
			p = p[:38+h>>4%10] // short of the TCP flags
		case 1, 2:
			p = p[:48+h>>4%20] // the headers whole, the rest cut (a snaplen)
		}
		ts := int64(ixTS0 + k*1000)
		if k%97 == 0 {
			ts -= 1500
		}
		e.Append(ts, h>>28%3/2, orig, p)
	}
	return e.Finish(seq)[wire.HeaderSize:]
}

// TestFlowsRepeat holds the store's shortcut (the index builder's test
// that a packet has the headers of the one before stands in for the
// flow table's, flow.Table.AddRepeat) to the table fed every packet by
// Add: on runs of one conversation's packets, one way and the other,
// on two interfaces with the same headers, captured short (of the
// headers, or of the payload only: wire and captured bytes differ), with SYN,
// FIN and RST among them, over index blocks and rotations, with flows
// ending idle in the middle of runs, the flow files are those of
// wantFlows.
func TestFlowsRepeat(t *testing.T) {
	for _, tc := range []struct {
		name string
		ft   flow.Config
	}{
		{"default timeouts", flow.Config{SplitPackets: 50}},
		// Flows end idle in the middle of runs: the run's time bound.
		{"short timeouts", flow.Config{SplitPackets: 50, IdleTimeout: 20 * time.Microsecond, ClosedTimeout: 5 * time.Microsecond}},
	} {
		t.Run(tc.name, func(t *testing.T) { testFlowsRepeat(t, tc.ft) })
	}
}

func testFlowsRepeat(t *testing.T, ft flow.Config) {
	cfg := Config{Flows: true, IndexBlock: MinIndexBlock, RotateSize: 64 << 10, Dir: t.TempDir(), FlowTable: ft}
	c := newCore(t, cfg)
	t.Cleanup(func() { c.Close() })
	h := hello("rp", 1)
	h.Interfaces = []wire.Interface{{Name: "eth0", LinkType: 1, SnapLen: 262144}, {Name: "eth1", LinkType: 1, SnapLen: 262144}}
	s, _, err := c.Begin(h, func() {})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 60; seq++ {
		if _, err := s.Batch(0, runBatch(seq, int(seq-1)*50, 50)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	s.End(true)
	files := agentDataFiles(t, filepath.Join(c.Dir(), "rp"))
	if len(files) < 2 {
		t.Fatalf("%d data files, want rotations", len(files))
	}
	table, _ := flow.NewTable(&cfg.FlowTable)
	want := wantFlowsOf(t, table, files, h.Interfaces)
	records := 0
	for i, path := range files {
		b, err := os.ReadFile(flow.Path(path))
		if err != nil {
			t.Fatal(err)
		}
		f, err := flow.Parse(b)
		if err != nil {
			t.Fatalf("%s: %v", filepath.Base(path), err)
		}
		for j := range min(len(f.Records), len(want[i])) {
			if f.Records[j] != want[i][j] {
				t.Fatalf("%s: record %d of %d\n%+v\nwant (of %d)\n%+v", filepath.Base(path), j, len(f.Records), f.Records[j], len(want[i]), want[i][j])
			}
		}
		if len(f.Records) != len(want[i]) {
			t.Fatalf("%s: %d records, want %d", filepath.Base(path), len(f.Records), len(want[i]))
		}
		records += len(f.Records)
	}
	if records < 30 {
		t.Fatalf("only %d records: the traffic is too thin to hold anything", records)
	}
	t.Logf("%d files, %d records", len(files), records)
}
