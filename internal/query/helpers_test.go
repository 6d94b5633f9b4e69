package query

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/compress"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// base is the first timestamp of the test packets.
const base = int64(1_780_000_000_000_000_000)

// tp is a test packet: its timestamp (ns after base), interface (0:
// eth0, 1: eth1) and UDP destination port.
type tp struct {
	ts    int64
	iface int
	port  uint16
	host  byte   // if set, the source address is 10.9.9.host
	pad   int    // bytes of zeros after the frame
	data  []byte // if set, the frame's captured bytes (host, port and pad ignored)
}

// ref is a packet as the test wrote it, for the expected result.
type ref struct {
	TS    int64
	Iface string
	Orig  uint32
	Data  []byte
	rank  int // agent's position by name
	seq   int // write order within the agent
	port  uint16
	agent string
}

// frame is a UDP frame whose bytes say which agent and packet it is.
func frame(agent string, seq int, port uint16) []byte {
	b := gen.Frame(make([]byte, 80+seq%50), gen.LinkTypeEthernet, uint32(len(agent)), uint64(seq))
	binary.BigEndian.PutUint16(b[14+20+2:], port)
	copy(b[len(b)-16:], agent)
	return b
}

// agentSpec is what writeAgent writes for one agent.
type agentSpec struct {
	name    string
	comp    string // "", "gzip" or "zstd"
	rotate  int64  // RotateSize; 0: one file per Close
	batches [][]tp // each committed
	open    bool   // leave the last file being written (.part)
	stats   bool   // record interface statistics (closed files get ISBs)
	ixBlock int64  // store.Config.IndexBlock
	frames  store.ZstdFrames
}

// writeAgent writes a's batches through a real store below dir and
// returns the packets written, in write order.
func writeAgent(t testing.TB, dir string, a agentSpec, rank int) []ref {
	t.Helper()
	var spec compress.Spec
	if a.comp != "" {
		var err error
		if spec, err = compress.ParseSpec(a.comp); err != nil {
			t.Fatal(err)
		}
	}
	st, err := store.Open(store.Config{Dir: dir, FileCompress: spec, ZstdFrames: a.frames, RotateSize: a.rotate, RotateInterval: -1, Fsync: store.FsyncNever, IndexBlock: a.ixBlock})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	closeStore := func() {
		if !closed {
			closed = true
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st.Close(ctx)
		}
	}
	t.Cleanup(closeStore)
	w, err := st.Writer(a.name)
	if err != nil {
		t.Fatal(err)
	}
	inst := st.Instance([16]byte{byte(rank + 1)}, a.name)
	w.Start("h1")
	var ifmap []int
	for _, n := range []string{"eth0", "eth1"} {
		i, err := w.AddInterface(wire.Interface{Name: n, LinkType: 1, SnapLen: 65535})
		if err != nil {
			t.Fatal(err)
		}
		ifmap = append(ifmap, i)
	}
	var refs []ref
	var e wire.BatchEncoder
	for bi, batch := range a.batches {
		e.Reset(nil)
		for _, p := range batch {
			data := frame(a.name, len(refs), p.port)
			data = append(data, make([]byte, p.pad)...)
			if p.host != 0 {
				copy(data[14+12:], []byte{10, 9, 9, p.host})
			}
			if p.data != nil {
				data = p.data
			}
			orig := uint32(len(data) + 7)
			e.Append(base+p.ts, uint32(p.iface), orig, data)
			refs = append(refs, ref{TS: base + p.ts, Iface: a.name + ":eth" + string(rune('0'+p.iface)), Orig: orig,
				Data: data, rank: rank, seq: len(refs), port: p.port, agent: a.name})
		}
		b, err := wire.ParseBatch(0, e.Finish(uint64(bi + 1))[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteBatch(&b, ifmap, inst); err != nil {
			t.Fatal(err)
		}
		if a.stats {
			if _, err := w.RecordStats(&wire.Stats{Time: base + batch[len(batch)-1].ts, AgentDrops: 3,
				Interfaces: []wire.IfaceStats{{Index: 0, Received: uint64(bi + 10), KernelDrops: uint64(bi), Captured: uint64(bi + 9)}}}, ifmap); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if !a.open {
		w.Close()
		closeStore()
	}
	return refs
}

// got is a packet read from the query's output.
type got struct {
	TS    int64
	Iface string
	Orig  uint32
	Data  []byte
}

// readOutput reads a query's output; it fails t if it is not pcapng.
func readOutput(t *testing.T, b []byte) (pkts []got, ifaces []pcapfile.Interface, stats []pcapfile.InterfaceStats) {
	t.Helper()
	r, err := pcapfile.NewReader(bytes.NewReader(b), &pcapfile.ReaderConfig{
		OnStats: func(_ int, st pcapfile.InterfaceStats) { stats = append(stats, st) }})
	if err != nil {
		t.Fatalf("output: %v", err)
	}
	for {
		var p pcapfile.Packet
		err := r.ReadInto(&p)
		if err == io.EOF {
			return pkts, r.Interfaces(), stats
		}
		if err != nil {
			t.Fatalf("output: %v", err)
		}
		pkts = append(pkts, got{p.Timestamp, r.Interfaces()[p.Interface].Name, p.OrigLen, bytes.Clone(p.Data)})
	}
}

// expect selects and orders refs as the query must: in [since, until)
// (relative to base), passing keep, by timestamp, then agent, then
// write order.
func expect(refs []ref, since, until int64, keep func(ref) bool) []got {
	var sel []ref
	for _, r := range refs {
		if r.TS >= base+since && r.TS < base+until && (keep == nil || keep(r)) {
			sel = append(sel, r)
		}
	}
	slices.SortStableFunc(sel, func(a, b ref) int {
		if a.TS != b.TS {
			if a.TS < b.TS {
				return -1
			}
			return 1
		}
		if a.rank != b.rank {
			return a.rank - b.rank
		}
		return a.seq - b.seq
	})
	out := make([]got, len(sel))
	for i, r := range sel {
		out[i] = got{r.TS, r.Iface, r.Orig, r.Data}
	}
	return out
}

// runQuery runs cfg and returns its output and result.
func runQuery(t *testing.T, cfg Config) ([]byte, Result, error) {
	t.Helper()
	var buf bytes.Buffer
	res, err := Run(context.Background(), cfg, &buf)
	return buf.Bytes(), res, err
}

// ts returns base+ns as a time.
func ts(ns int64) time.Time { return time.Unix(0, base+ns) }

// withoutComments returns the pcapng b (little-endian, as Run writes
// it) with the comments of its section header and interface blocks
// left out: the coverage they carry is what the query knew when it
// wrote them, which differs between an indexed read and a scan.
// Everything else stays byte for byte.
func withoutComments(t *testing.T, b []byte) []byte {
	t.Helper()
	le := binary.LittleEndian
	var out []byte
	for len(b) > 0 {
		if len(b) < 12 {
			t.Fatalf("withoutComments: %d trailing bytes", len(b))
		}
		typ, n := le.Uint32(b), int(le.Uint32(b[4:]))
		if n < 12 || n > len(b) {
			t.Fatalf("withoutComments: block of %d bytes, %d left", n, len(b))
		}
		fixed := map[uint32]int{0x0A0D0D0A: 16, 1: 8}[typ]
		if fixed == 0 {
			out = append(out, b[:n]...)
			b = b[n:]
			continue
		}
		body := slices.Clone(b[8 : 8+fixed])
		for o := b[8+fixed : n-4]; len(o) >= 4; {
			code, l := le.Uint16(o), int(le.Uint16(o[2:]))
			pad := l + (-l & 3)
			if code != 1 {
				body = append(body, o[:4+pad]...)
			}
			if code == 0 {
				break
			}
			o = o[4+pad:]
		}
		out = le.AppendUint32(out, typ)
		out = le.AppendUint32(out, uint32(len(body)+12))
		out = append(out, body...)
		out = le.AppendUint32(out, uint32(len(body)+12))
		b = b[n:]
	}
	return out
}

// onlyFile is the one file of agent's directory below dir matching
// pattern; it fails t if there is not exactly one.
func onlyFile(t *testing.T, dir, agent, pattern string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, agent, pattern))
	if len(files) != 1 {
		t.Fatalf("%s: %q, want one %s", agent, files, pattern)
	}
	return files[0]
}
