package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pcapsync/pcapsync/internal/flow"
	"github.com/pcapsync/pcapsync/internal/gen"
	"github.com/pcapsync/pcapsync/internal/index"
	"github.com/pcapsync/pcapsync/internal/layout"
	"github.com/pcapsync/pcapsync/internal/pcapfile"
	"github.com/pcapsync/pcapsync/internal/store"
	"github.com/pcapsync/pcapsync/internal/wire"
)

// QueryData is the output root a query bench reads, as makeQueryData
// wrote it, and what is known of its packets. It is saved beside the
// root (queryManifest) so that a kept work directory is reused.
type QueryData struct {
	Version   int           // of the generator; a root of another version is made again
	Bytes     int64         // the target the root was made for (QueryConfig.Bytes)
	Agents    int           // agents, one directory each
	Span      time.Duration // packet time the root was made for (QueryConfig.Span)
	Rotate    int64         // the store's RotateSize
	Packets   int64         // in all files
	DataBytes int64         // of the data files
	IdxBytes  int64         // of their index files
	FlowBytes int64         // of their flow files (store.Config.Flows, as the collector's default)
	Files     int           // data files
	First     time.Time     // first packet's timestamp
	Last      time.Time     // last packet's timestamp
	Needle    string        // the needle host's address
	NeedleN   int64         // packets to or from it
	Since     time.Time     // the broad query's range, [Since, Until)
	Until     time.Time
	RangeN    int64 // packets in the range
	RangeTCP  int64 // TCP packets in the range
	// The index blocks of all files; those holding a packet of the
	// needle host; those whose filter may hold it (a superset, but for
	// a wrong index).
	Blocks, NeedleBlocks, NeedleMay int
}

// queryDataVersion changes whenever the generator writes other packets.
const queryDataVersion = 4

const (
	queryManifest = "qbench.json" // in the work directory, beside the root
	queryRoot     = "root"        // the output root, in the work directory
	// queryBatch is the packets per batch, as an agent at about 1 200
	// packets/s sends them with its 50 ms flush interval.
	queryBatch = 64
	// queryFlows is each agent's flows active at once; a packet belongs
	// to one of them chosen at random, and a flow that ends is replaced
	// by a new one.
	queryFlows = 32
	// queryFlowLen is the mean packets of a flow (geometric).
	queryFlowLen = 60
	// queryNeedleFlows is the needle host's flows per agent, each of
	// queryNeedleLen packets, spread evenly over the agent's packets.
	queryNeedleFlows = 4
	queryNeedleLen   = 40
	// queryEstPacket is the mean bytes an IMIX packet takes in a file
	// (frame 354.3 bytes, enhanced packet block 32, marks: 387 in all),
	// a little under, so that an agent's packets take at least its share
	// of the bytes; they are spaced over Span.
	queryEstPacket = 386
)

// queryStart is the first packet's time (an arbitrary past moment, so
// that the ranges are absolute).
var queryStart = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

// queryNeedle is the needle host: outside the peers' 10.0.0.0/16, so
// only its own flows carry it.
var queryNeedle = netip.AddrFrom4([4]byte{10, 1, 0, 7})

// queryService is a local service the flows reach: port, IP protocol
// and weight.
var queryServices = []struct {
	port   uint16
	proto  byte
	weight int
}{
	{443, 6, 50}, {80, 6, 15}, {22, 6, 5}, {5432, 6, 5}, {8080, 6, 5},
	{53, 17, 12}, {123, 17, 3}, {514, 17, 5},
}

// queryRange returns the broad query's range for a root whose packets
// start at queryStart and span span: the minute from the middle,
// on a whole second.
func queryRange(span time.Duration) (since, until time.Time) {
	since = queryStart.Add((span / 2).Truncate(time.Second))
	return since, since.Add(time.Minute)
}

// loadQueryData returns the data of work's root if its manifest matches
// want (version, bytes, agents, span, rotation) and its files are there
// with their sizes; ok is false otherwise.
func loadQueryData(work string, want QueryData) (QueryData, bool) {
	var d QueryData
	b, err := os.ReadFile(filepath.Join(work, queryManifest))
	if err != nil || json.Unmarshal(b, &d) != nil {
		return d, false
	}
	if d.Version != want.Version || d.Bytes != want.Bytes || d.Agents != want.Agents || d.Span != want.Span || d.Rotate != want.Rotate {
		return d, false
	}
	files, idx, flows, err := queryFiles(filepath.Join(work, queryRoot))
	if err != nil || len(files) != d.Files {
		return d, false
	}
	data, err := sizes(files)
	if err != nil || data != d.DataBytes {
		return d, false
	}
	if n, err := sizes(idx); err != nil || n != d.IdxBytes {
		return d, false
	}
	if n, err := sizes(flows); err != nil || n != d.FlowBytes {
		return d, false
	}
	return d, true
}

func sizes(files []string) (int64, error) {
	var n int64
	for _, f := range files {
		s, err := fileSize(f)
		if err != nil {
			return 0, err
		}
		n += s
	}
	return n, nil
}

// queryFiles returns the data files of root in name order (agent, then
// the time the store opened them) and their index files.
func queryFiles(root string) (data, idx, flows []string, err error) {
	all, err := filepath.Glob(filepath.Join(root, "*", "*.pcapng*"))
	if err != nil {
		return nil, nil, nil, err
	}
	slices.Sort(all)
	for _, f := range all {
		switch {
		case strings.HasSuffix(f, ".idx"):
			idx = append(idx, f)
		case strings.HasSuffix(f, flow.Suffix):
			flows = append(flows, f)
		case strings.HasSuffix(f, index.BinsSuffix):
			// the timeline summary (a few KiB beside each closed file)
		case strings.HasSuffix(f, layout.PartSuffix):
			return nil, nil, nil, fmt.Errorf("%s: a file left unfinished", f)
		default:
			data = append(data, f)
		}
	}
	return data, idx, flows, nil
}

// makeQueryData writes an output root of at least want.Bytes bytes of
// data files below work/root, want.Agents agents writing at once
// through one store, as a collector writes them: plain pcapng (the
// collector's default), an index beside each file, files rotated at
// want.Rotate bytes, batches of queryBatch packets, each with its mark.
// Every agent's packets are IMIX Ethernet frames (TCP and UDP over
// IPv4) between the agent's own address and peers of 10.0.0.0/16, in
// flows (queryFlows at once, queryFlowLen packets on average) of the
// services in queryServices, timestamps evenly spaced over about
// want.Span from queryStart; and queryNeedleFlows flows of the needle
// host. It saves the manifest last.
func makeQueryData(ctx context.Context, work string, want QueryData) (QueryData, error) {
	d := want
	root := filepath.Join(work, queryRoot)
	for _, p := range []string{filepath.Join(work, queryManifest), root} {
		if err := os.RemoveAll(p); err != nil {
			return d, err
		}
	}
	st, err := store.Open(store.Config{Dir: root, RotateSize: want.Rotate, RotateInterval: -1, Fsync: store.FsyncNever, Flows: store.DefaultFlows})
	if err != nil {
		return d, fmt.Errorf("opening the store: %w", err)
	}
	d.Since, d.Until = queryRange(want.Span)
	d.Needle = queryNeedle.String()
	perAgent := want.Bytes/int64(want.Agents) + 1
	step := int64(want.Span) / max(perAgent/queryEstPacket, 1)
	gens := make([]agentGen, want.Agents)
	var wg sync.WaitGroup
	errs := make([]error, want.Agents)
	for i := range gens {
		g := &gens[i]
		g.init(i, want.Agents, step, perAgent, d.Since.UnixNano(), d.Until.UnixNano())
		wg.Go(func() { errs[i] = g.write(ctx, st) })
	}
	wg.Wait()
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := errors.Join(append(errs, st.Close(cctx))...); err != nil {
		return d, err
	}
	first, last := int64(1<<63-1), int64(0)
	for _, g := range gens {
		d.Packets += g.packets
		d.NeedleN += g.needleN
		d.RangeN += g.rangeN
		d.RangeTCP += g.rangeTCP
		first, last = min(first, g.first), max(last, g.last)
	}
	d.First, d.Last = time.Unix(0, first).UTC(), time.Unix(0, last).UTC()
	files, idx, flows, err := queryFiles(root)
	if err != nil {
		return d, err
	}
	d.Files = len(files)
	if d.DataBytes, err = sizes(files); err != nil {
		return d, err
	}
	if d.IdxBytes, err = sizes(idx); err != nil {
		return d, err
	}
	if d.FlowBytes, err = sizes(flows); err != nil {
		return d, err
	}
	if err := needleBlocks(&d, files); err != nil {
		return d, err
	}
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return d, err
	}
	return d, os.WriteFile(filepath.Join(work, queryManifest), b, 0o640)
}

// needleBlocks counts d's index blocks, those that hold a packet to or
// from the needle host (reading every file) and those whose filter may
// hold the host.
func needleBlocks(d *QueryData, files []string) error {
	m := index.Host(queryNeedle)
	needle := queryNeedle.As4()
	for _, f := range files {
		ix, err := index.Open(f)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		has := make([]bool, len(ix.All))
		if err := eachPacket(f, func(ts int64, data []byte) {
			i, _ := slices.BinarySearchFunc(ix.All, ts, func(b index.Block, ts int64) int { return cmp.Compare(b.Last, ts) })
			ip := data[14:]
			if i < len(has) && ([4]byte(ip[12:16]) == needle || [4]byte(ip[16:20]) == needle) {
				has[i] = true
			}
		}); err != nil {
			return err
		}
		for i := range ix.All {
			d.Blocks++
			if has[i] {
				d.NeedleBlocks++
			}
			if ix.MayMatch(i, m) {
				d.NeedleMay++
			}
		}
	}
	return nil
}

// eachPacket calls fn with the timestamp and bytes of every packet of
// the pcapng file path; data is valid until fn returns.
func eachPacket(path string, fn func(ts int64, data []byte)) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := pcapfile.NewReader(bufio.NewReaderSize(f, 1<<20), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var p pcapfile.Packet
	for err = r.ReadInto(&p); err == nil; err = r.ReadInto(&p) {
		fn(p.Timestamp, p.Data)
	}
	if err != io.EOF {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// qflow is one flow of an agent's traffic.
type qflow struct {
	peer     [4]byte
	peerPort uint16
	svc      int // index in queryServices
	left     int // packets still to send
	seq      uint32
}

// agentGen makes one agent's packets and writes them.
type agentGen struct {
	name   string
	local  [4]byte
	rng    *rand.Rand
	flows  [queryFlows]qflow
	step   int64   // mean ns between packets
	target int64   // bytes to write
	needle []int64 // packet numbers where a needle flow starts
	// range of the broad query, Unix ns
	since, until int64

	packets, needleN, rangeN, rangeTCP int64
	first, last                        int64
	noise                              []byte
}

func (g *agentGen) init(i, agents int, step, target, since, until int64) {
	g.name = fmt.Sprintf("host%02d", i+1)
	g.local = [4]byte{192, 168, 10, byte(i + 1)}
	g.rng = rand.New(rand.NewPCG(uint64(i+1), 0x9b3c))
	g.step, g.target, g.since, g.until = step, target, since, until
	n := target / queryEstPacket
	for k := range int64(queryNeedleFlows) {
		// Flow k starts at (2k+1)/(2·flows) of the packets, moved by up
		// to half the distance to the next one so that agents differ,
		// and the last one has room to end.
		g.needle = append(g.needle, n*(2*k+1)/(2*queryNeedleFlows)+int64(i)*n/int64(2*queryNeedleFlows*agents))
	}
	g.noise = make([]byte, 4096)
	for j := range g.noise {
		g.noise[j] = byte(g.rng.Uint32())
	}
	for j := range g.flows {
		g.newFlow(&g.flows[j])
	}
}

// newFlow starts a random flow in f.
func (g *agentGen) newFlow(f *qflow) {
	b := uint32(g.rng.IntN(1 << 16))
	f.peer = [4]byte{10, 0, byte(b >> 8), byte(b)}
	f.peerPort = uint16(32768 + g.rng.IntN(28232))
	w := g.rng.IntN(100)
	for f.svc = 0; w >= queryServices[f.svc].weight; f.svc++ {
		w -= queryServices[f.svc].weight
	}
	// Geometric with mean queryFlowLen.
	f.left = 1
	for g.rng.IntN(queryFlowLen) != 0 {
		f.left++
	}
	f.seq = g.rng.Uint32()
}

// write writes the agent's packets through st: whole batches until
// about target bytes (queryEstPacket bytes per packet).
func (g *agentGen) write(ctx context.Context, st *store.Store) error {
	w, err := st.Writer(g.name)
	if err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	inst := st.Instance([16]byte{'q', 'b', g.local[3]}, g.name)
	w.Start(g.name)
	fi, err := w.AddInterface(wire.Interface{Name: "eth0", LinkType: gen.LinkTypeEthernet, SnapLen: 65535})
	if err != nil {
		return fmt.Errorf("%s: %w", g.name, err)
	}
	ifmap := []int{fi}
	var e wire.BatchEncoder
	buf := make([]byte, 1500)
	ts := queryStart.UnixNano()
	next := 0 // next needle flow
	for seq := uint64(1); g.packets < g.target/queryEstPacket; seq++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		e.Reset(nil)
		for range queryBatch {
			i := g.packets
			if next < len(g.needle) && i == g.needle[next] {
				f := &g.flows[g.rng.IntN(queryFlows)]
				g.newFlow(f)
				f.peer, f.left = queryNeedle.As4(), queryNeedleLen
				next++
			}
			f := &g.flows[g.rng.IntN(queryFlows)]
			size, _ := gen.MixIMIX.Size(uint64(i), nil)
			frame := g.frame(buf[:size], f, i)
			ts += g.step/2 + g.rng.Int64N(g.step)
			e.Append(ts, 0, uint32(len(frame)), frame)
			g.count(f, ts)
			if f.left--; f.left == 0 {
				g.newFlow(f)
			}
		}
		b, err := wire.ParseBatch(0, e.Finish(seq)[wire.HeaderSize:], wire.BatchLimits{Unchecked: true})
		if err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
		if _, err := w.WriteBatch(&b, ifmap, inst); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
		if err := w.Commit(); err != nil {
			return fmt.Errorf("%s: %w", g.name, err)
		}
	}
	g.last = ts
	return w.Close()
}

// count counts a packet of flow f at ts.
func (g *agentGen) count(f *qflow, ts int64) {
	if g.packets == 0 {
		g.first = ts
	}
	g.packets++
	if f.peer == queryNeedle.As4() {
		g.needleN++
	}
	if ts >= g.since && ts < g.until {
		g.rangeN++
		if queryServices[f.svc].proto == 6 {
			g.rangeTCP++
		}
	}
}

// frame fills buf (at least 64 bytes) with packet i of flow f: Ethernet,
// IPv4, TCP or UDP, from the peer to the agent or back at random, the
// payload bytes taken from the agent's noise.
func (g *agentGen) frame(buf []byte, f *qflow, i int64) []byte {
	svc := queryServices[f.svc]
	src, dst, sport, dport := f.peer, g.local, f.peerPort, svc.port
	if g.rng.IntN(2) == 0 {
		src, dst, sport, dport = dst, src, dport, sport
	}
	copy(buf, []byte{2, 0, 0, 0, 0, g.local[3], 2, 0, 0, 0, 0, 0xfe, 0x08, 0x00})
	ip := buf[14:]
	ip[0], ip[1] = 0x45, 0
	binary.BigEndian.PutUint16(ip[2:], uint16(len(ip)))
	binary.BigEndian.PutUint16(ip[4:], uint16(i))
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // don't fragment
	ip[8], ip[9] = 64, svc.proto
	ip[10], ip[11] = 0, 0
	copy(ip[12:16], src[:])
	copy(ip[16:20], dst[:])
	binary.BigEndian.PutUint16(ip[10:], checksum(ip[:20]))
	l4 := ip[20:]
	binary.BigEndian.PutUint16(l4[0:], sport)
	binary.BigEndian.PutUint16(l4[2:], dport)
	hdr := 8
	if svc.proto == 6 {
		hdr = 20
		binary.BigEndian.PutUint32(l4[4:], f.seq)
		binary.BigEndian.PutUint32(l4[8:], ^f.seq)
		l4[12], l4[13] = 5<<4, 0x18 // PSH, ACK
		binary.BigEndian.PutUint16(l4[14:], 65535)
		binary.BigEndian.PutUint32(l4[16:], 0) // checksum, urgent pointer
		f.seq += uint32(len(l4) - hdr)
	} else {
		binary.BigEndian.PutUint16(l4[4:], uint16(len(l4)))
		binary.BigEndian.PutUint16(l4[6:], 0)
	}
	pay := l4[hdr:]
	off := int(i*131) % (len(g.noise) - len(pay))
	copy(pay, g.noise[off:])
	return buf
}

// checksum is the IPv4 header checksum of h.
func checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}
