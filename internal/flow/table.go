package flow

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Defaults of Config.
const (
	// DefaultMaxFlows bounds the flows a Table holds (about 300 bytes
	// each: 10 MiB).
	DefaultMaxFlows = 32768
	// DefaultIdleTimeout ends a flow that saw no packet for this long.
	DefaultIdleTimeout = 2 * time.Minute
	// DefaultClosedTimeout ends a TCP flow this long after its last
	// packet once it has ended (FIN both ways, or RST), so that the last
	// ACK and retransmissions are counted in it (Zeek's tcp_close_delay).
	DefaultClosedTimeout = 5 * time.Second
	// DefaultSplitPackets ends a record after this many packets and goes
	// on in the next (Arkime's maxPackets).
	DefaultSplitPackets = 10000
)

// Config configures a Table. The zero value means the defaults.
type Config struct {
	// MaxFlows bounds the flows held; a new flow beyond it ends the least
	// recently active one (EndEvicted). 0: DefaultMaxFlows.
	MaxFlows int
	// IdleTimeout: 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ClosedTimeout: 0 means DefaultClosedTimeout.
	ClosedTimeout time.Duration
	// SplitPackets: 0 means DefaultSplitPackets, negative never.
	SplitPackets int
}

// Validate checks c: nothing negative but SplitPackets, MaxFlows at
// most 1<<24.
func (c *Config) Validate() error {
	switch {
	case c.MaxFlows < 0 || c.MaxFlows > 1<<24:
		return fmt.Errorf("max flows %d out of range [0, %d]: %w", c.MaxFlows, 1<<24, ErrConfig)
	case c.IdleTimeout < 0:
		return fmt.Errorf("idle timeout %v negative: %w", c.IdleTimeout, ErrConfig)
	case c.ClosedTimeout < 0:
		return fmt.Errorf("closed timeout %v negative: %w", c.ClosedTimeout, ErrConfig)
	}
	return nil
}

// Counters are a Table's totals since it was made.
type Counters struct {
	Packets uint64 // packets added
	Flows   uint64 // flows started
	Records uint64 // records flushed
	Evicted uint64 // flows ended early by MaxFlows (EndEvicted)
}

// entry is a flow held by a Table.
type entry struct {
	rec  Record
	ckey Key    // the canonical key
	hash uint64 // of ckey
	rev  bool   // the initiator is the canonical key's Dst
	syn  bool   // the initiator was decided by a SYN or SYN-ACK
	fin  [2]bool
	done bool // FIN both ways or RST: on the closed list
}

// link is an entry's place in its list (open or closed), least recently
// active first. The links are apart from the entries so that moving an
// entry to its list's end touches 8-byte neighbours, not 250-byte ones.
type link struct{ prev, next int32 }

// list is a doubly linked list of entries by index (-1: none).
type list struct{ head, tail int32 }

// Table turns packets into flow records. Add every packet of a data
// file in the order written; records come out as flows end (FIN both
// ways or RST and ClosedTimeout, IdleTimeout, SplitPackets, MaxFlows)
// and at Rotate and Flush, and accumulate in Records until Clear. Time
// is the packets' (the latest seen), and Expire(now) for a clock.
//
// Add does not allocate for a packet of a flow the table holds; a new
// flow may grow the table up to MaxFlows. A Table is not safe for
// concurrent use; the zero value is not ready: use NewTable.
type Table struct {
	cfg     Config
	idle    int64 // ns
	closed  int64 // ns
	split   uint64
	now     int64
	index   keyIndex // canonical key -> entries
	entries []entry
	links   []link // beside entries
	free    []int32
	open    list
	done    list
	out     []Record
	c       Counters
	// The last packet's flow: its entry (-1: none), the packet's key as
	// decoded and whether that was the canonical key reversed. A packet
	// of the same flow the same way skips the hash and the index probe.
	last        int32
	lastKey     Key
	lastSwapped bool
	// The headers of the last packet's key (lastKey) when hdrOK: a
	// packet with the same ones, or them reversed, has that key, or it
	// reversed, and is not decoded again.
	hdr   header
	hdrOK bool
	// expireAt: expire ends nothing while now is at most this (the
	// lists' heads' Last plus their timeouts), or math.MinInt64 when a
	// head changed.
	expireAt int64
	// run: packets of the last packet's flow that change nothing but
	// its counters are summed here and added to the entry at the next
	// call that is not such a packet (settle).
	run run
}

// run is what Table.Add sums of the packets of one flow in a row that
// need nothing but counting: the last packet's headers (headerOf) or
// them reversed, in the last packet's index block, no SYN, FIN or RST,
// not a time at which tick would look for idle flows, not the packet
// that reaches SplitPackets. Such a packet costs the header check and a few
// additions (the write path's common case: runs of a flow's packets).
type run struct {
	on       bool   // the fields below describe entry i
	i        int32  // the entry
	hdr, rev header // its packets' headers: direction dir, and 1-dir
	dir      int    // direction of hdr's packets
	ldir     int    // direction of the last packet summed or started with
	block    uint32
	room     uint64 // packets the run may still sum: the next one after splits
	safe     int64  // max(expireAt, now) when the run began: no idle check at or before
	packets  [2]uint64
	bytes    [2]uint64
	captured [2]uint64
	flags    [2]uint8
	first    int64 // the earliest and latest time summed, or the
	last     int64 // entry's Last (no new bound) before any
}

// NewTable returns an empty table. A nil config means the defaults.
func NewTable(c *Config) (*Table, error) {
	var cfg Config
	if c != nil {
		cfg = *c
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxFlows == 0 {
		cfg.MaxFlows = DefaultMaxFlows
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.ClosedTimeout == 0 {
		cfg.ClosedTimeout = DefaultClosedTimeout
	}
	t := &Table{cfg: cfg, idle: int64(cfg.IdleTimeout), closed: int64(cfg.ClosedTimeout),
		open: list{-1, -1}, done: list{-1, -1}, last: -1, expireAt: math.MinInt64}
	switch {
	case cfg.SplitPackets == 0:
		t.split = DefaultSplitPackets
	case cfg.SplitPackets > 0:
		t.split = uint64(cfg.SplitPackets)
	}
	return t, nil
}

// Add adds one packet: captured on interface iface of link type
// linkType at ts (Unix ns), wireLen bytes on the wire, data its captured
// bytes (read, not kept), written in index block block of the data file.
func (t *Table) Add(iface, linkType uint32, ts int64, wireLen uint32, data []byte, block uint32) {
	if t.run.on && t.sum(iface, linkType, ts, wireLen, data, block) {
		return
	}
	t.add(iface, linkType, ts, wireLen, data, block)
}

// add is Add for a packet the run did not take.
func (t *Table) add(iface, linkType uint32, ts int64, wireLen uint32, data []byte, block uint32) {
	t.settle()
	h, hok := headerOf(iface, linkType, data)
	if hok && t.hdrOK && t.last >= 0 {
		// The headers Decode reads are the last packet's, or the same
		// seen from the other side (a reply): so is its key. Headers
		// equal both ways (one address, one port) are the first case.
		rev := h != t.hdr && h == t.hdr.reverse()
		if p := headerPacket(h, data); (h == t.hdr || rev) && !synOnly(p) {
			t.tick(ts)
			i, swapped := t.last, t.lastSwapped != rev
			if i < 0 { // ended by tick
				k := t.lastKey
				if rev {
					k = k.Reverse()
				}
				i, swapped = t.find(&k, p)
				t.hdr = h
			}
			t.last = i
			t.count(i, swapped, p, ts, wireLen, uint32(len(data)), block)
			t.startRun(h, i, swapped, block)
			return
		}
	}
	var k Key
	p := Decode(&k, linkType, iface, data)
	t.AddKey(&k, p, ts, wireLen, uint32(len(data)), block)
	t.hdr, t.hdrOK = h, hok
	if hok {
		t.startRun(h, t.last, t.lastSwapped, block)
	}
}

// sum adds a packet to the run when it belongs there (see run), and
// reports whether it did.
func (t *Table) sum(iface, linkType uint32, ts int64, wireLen uint32, data []byte, block uint32) bool {
	r := &t.run
	// tick would look for idle flows: the time moves past the latest
	// (now, or the run's last) and past expireAt.
	expires := ts > r.safe && ts > r.last
	if block != r.block || expires || r.room == 0 || linkType != LinkEthernet || iface != r.hdr.iface || len(data) < 48 {
		return false
	}
	// headerOf's test and compare on the words as they are: IPv4 in
	// Ethernet without options, fragment offset 0, the run's protocol,
	// addresses and ports one way or the other.
	be := binary.BigEndian
	if be.Uint32(data[12:])>>8 != 0x080045 || be.Uint32(data[20:])&0x1fff00ff != uint32(r.hdr.proto) {
		return false
	}
	addrs, ports := be.Uint64(data[26:]), be.Uint32(data[34:])
	dir := r.dir
	switch {
	case addrs == r.hdr.addrs && ports == r.hdr.ports:
	case addrs == r.rev.addrs && ports == r.rev.ports:
		dir = 1 - dir
	default:
		return false
	}
	return r.take(dir, ts, wireLen, data)
}

// AddRepeat is Add for a packet that the caller knows to have the
// headers of the packet before it, the one of the last call to Add or
// AddRepeat, the same way: an Ethernet frame (on interface iface) of
// IPv4 without options whose protocol, addresses and ports (TCP, UDP
// or SCTP, not a later fragment) are that packet's, in the same order.
// The index builder tests exactly this (index.Builder.Add's result),
// so a packet of the last packet's flow is not read twice. It reports
// whether it added the packet; when it did not, the caller calls Add.
// A packet that is not what the caller promised makes wrong records.
func (t *Table) AddRepeat(iface uint32, ts int64, wireLen uint32, data []byte, block uint32) bool {
	return t.run.on && t.repeat(iface, ts, wireLen, data, block)
}

// repeat is AddRepeat with a run on: the run takes the packet in the
// direction of the last one when it would take it (sum), without
// reading its addresses and ports.
func (t *Table) repeat(iface uint32, ts int64, wireLen uint32, data []byte, block uint32) bool {
	r := &t.run
	if block != r.block || ts > r.safe && ts > r.last || r.room == 0 || iface != r.hdr.iface || len(data) < 48 {
		return false
	}
	return r.take(r.ldir, ts, wireLen, data)
}

// Repeats are the limits within which a caller may sum packets that
// AddRepeat would take itself, and hand them to the table in one
// AddRepeats: packets on interface Iface in index block Block, at most
// Room of them, none later than both Safe and the latest time summed
// (Last before any: the table looks for idle flows then), none shorter
// than 48 bytes, and for TCP (TCP set) none whose byte 47, the flags,
// has SYN, FIN or RST. They hold until the next call to the table.
type Repeats struct {
	Iface, Block uint32
	Safe, Last   int64
	Room         uint64
	TCP          bool
}

// Repeats returns the limits within which packets that AddRepeat would
// take may be summed by the caller (see Repeats), or false when
// AddRepeat would take none now.
func (t *Table) Repeats() (Repeats, bool) {
	r := &t.run
	if !r.on || r.room == 0 {
		return Repeats{}, false
	}
	return Repeats{Iface: r.hdr.iface, Block: r.block, Safe: r.safe, Last: r.last, Room: r.room, TCP: r.hdr.proto == ProtoTCP}, true
}

// AddRepeats adds n packets, each of which AddRepeat would have taken,
// summed by the caller within the limits Repeats returned, with no
// call to the table in between: bytes the sum of their max(wire length,
// captured length), captured of their captured lengths, first and last
// their earliest and latest times, flags their TCP flags or-ed. It is
// AddRepeat of each in turn, in one call.
func (t *Table) AddRepeats(n, bytes, captured uint64, first, last int64, flags uint8) {
	r := &t.run
	if n == 0 || !r.on {
		return
	}
	d := r.ldir & 1
	r.room -= min(n, r.room)
	r.packets[d] += n
	r.bytes[d] += bytes
	r.captured[d] += captured
	if r.hdr.proto == ProtoTCP {
		r.flags[d] |= flags
	}
	r.last = max(r.last, last)
	r.first = min(r.first, first)
}

// take sums a packet of the run's headers, direction dir, unless its
// TCP flags open or end the connection (false: not summed).
func (r *run) take(dir int, ts int64, wireLen uint32, data []byte) bool {
	if r.hdr.proto == ProtoTCP {
		f := data[47]
		if f&(TCPSyn|TCPFin|TCPRst) != 0 {
			return false
		}
		r.flags[dir] |= f
	}
	r.ldir = dir
	capLen := uint64(len(data))
	r.room--
	r.packets[dir]++
	r.bytes[dir] += max(uint64(wireLen), capLen)
	r.captured[dir] += capLen
	r.last = max(r.last, ts)
	r.first = min(r.first, ts)
	return true
}

// startRun starts a run after the packet of header h just counted in
// entry i (swapped: its key was the canonical one reversed), in block:
// unless the entry's record is empty (a split emitted it) or the next
// packet would split it, when every packet goes the plain way.
func (t *Table) startRun(h header, i int32, swapped bool, block uint32) {
	if i < 0 {
		return
	}
	e := &t.entries[i]
	left := uint64(math.MaxUint64)
	if t.split > 0 {
		left = t.split - min(t.split, e.rec.TotalPackets())
	}
	if e.rec.TotalPackets() == 0 || left <= 1 {
		return
	}
	dir := 0
	if swapped != e.rev {
		dir = 1
	}
	// Headers equal both ways (one address, one port) match hdr first:
	// the same direction, as Add's header check takes them.
	t.run = run{on: true, i: i, hdr: h, rev: h.reverse(), dir: dir, ldir: dir, block: block, room: left - 1,
		safe: max(t.expireAt, t.now), first: e.rec.Last, last: e.rec.Last}
}

// settle adds the run's sums to its entry and ends the run: before
// anything else reads or changes the table.
func (t *Table) settle() {
	r := &t.run
	if !r.on {
		return
	}
	r.on = false
	n := r.packets[0] + r.packets[1]
	if n == 0 {
		return
	}
	rec := &t.entries[r.i].rec
	for d := range 2 {
		rec.Packets[d] += r.packets[d]
		rec.Bytes[d] += r.bytes[d]
		rec.Captured[d] += r.captured[d]
		rec.TCPFlags[d] |= r.flags[d]
	}
	rec.First, rec.Last = min(rec.First, r.first), max(rec.Last, r.last)
	t.c.Packets += n
	// What tick does for each packet: none of them made it expire.
	t.now = max(t.now, r.last)
}

// header is what Decode reads of the headers of an Ethernet frame of
// IPv4 without options, not a later fragment, of TCP, UDP or SCTP with
// the bytes of its ports and TCP flags captured: the whole key.
type header struct {
	addrs uint64 // source and destination
	ports uint32 // source and destination
	proto uint8
	iface uint32
}

// headerOf returns the header of a packet, false for a packet not of
// that common kind.
func headerOf(iface, linkType uint32, data []byte) (header, bool) {
	if linkType != LinkEthernet || len(data) < 14+20+14 || data[12] != 0x08 || data[13] != 0x00 || data[14] != 0x45 {
		return header{}, false
	}
	be := binary.BigEndian
	proto := data[23]
	if be.Uint16(data[20:])&0x1fff != 0 || proto != ProtoTCP && proto != ProtoUDP && proto != ProtoSCTP {
		return header{}, false
	}
	return header{addrs: be.Uint64(data[26:]), ports: be.Uint32(data[34:]), proto: proto, iface: iface}, true
}

// reverse returns the header of a packet of the same flow the other way.
func (h header) reverse() header {
	h.addrs = bits.RotateLeft64(h.addrs, 32)
	h.ports = bits.RotateLeft32(h.ports, 16)
	return h
}

// headerPacket returns what Decode reads besides the key of a packet
// of header h.
func headerPacket(h header, data []byte) Packet {
	if h.proto == ProtoTCP {
		return Packet{TCPFlags: data[47], TCP: true}
	}
	return Packet{}
}

// synOnly reports whether p opens a connection (SYN without ACK).
func synOnly(p Packet) bool { return p.TCP && p.TCPFlags&(TCPSyn|TCPAck) == TCPSyn }

// AddKey is Add for a packet already decoded (Decode) into k and p,
// with capLen captured bytes. It may change *k.
func (t *Table) AddKey(k *Key, p Packet, ts int64, wireLen, capLen uint32, block uint32) {
	t.settle()
	t.hdrOK = false
	t.tick(ts)
	var i int32
	swapped := t.lastSwapped
	if t.last < 0 || *k != t.lastKey || synOnly(p) {
		i, swapped = t.find(k, p)
	} else {
		i = t.last
	}
	t.last = i
	t.count(i, swapped, p, ts, wireLen, capLen, block)
}

// tick counts a packet at ts and ends the flows idle at the latest time.
func (t *Table) tick(ts int64) {
	t.c.Packets++
	if ts > t.now {
		t.now = ts
		if ts > t.expireAt {
			t.expire()
		}
	}
}

// count adds a packet to entry i: swapped if its key is the canonical
// key reversed.
func (t *Table) count(i int32, swapped bool, p Packet, ts int64, wireLen, capLen uint32, block uint32) {
	wireLen = max(wireLen, capLen)
	e := &t.entries[i]
	dir := 0
	if swapped != e.rev {
		dir = 1
	}
	if p.TCP && !e.syn && p.TCPFlags&TCPSyn != 0 {
		// A SYN decides: its sender initiates; a SYN-ACK's receiver.
		from := dir
		if p.TCPFlags&TCPAck != 0 {
			from = 1 - dir
		}
		if from == 1 {
			e.reverse()
			dir = 1 - dir
		}
		e.syn = true
		e.rec.Flags |= RecordSYN
	}
	r := &e.rec
	if r.TotalPackets() == 0 {
		if ts < r.Last {
			t.expireAt = math.MinInt64
		}
		r.First, r.Last = ts, ts
	} else {
		r.First = min(r.First, ts)
		r.Last = max(r.Last, ts)
	}
	r.Packets[dir]++
	r.Bytes[dir] += uint64(wireLen)
	r.Captured[dir] += uint64(capLen)
	if n := r.NRuns; n == 0 || block < r.Blocks[n-1].First || block > r.Blocks[n-1].Last {
		r.addBlock(block)
	}
	if p.TCP {
		r.TCPFlags[dir] |= p.TCPFlags
		if p.TCPFlags&TCPFin != 0 {
			e.fin[dir] = true
		}
		if !e.done && (p.TCPFlags&TCPRst != 0 || e.fin[0] && e.fin[1]) {
			e.done = true
			r.End = EndFIN
			if p.TCPFlags&TCPRst != 0 {
				r.End = EndRST
			}
			t.unlink(&t.open, i)
			t.push(&t.done, i)
		}
	}
	if e.done {
		t.touch(&t.done, i)
	} else if t.open.tail != i { // most often: no call
		t.touch(&t.open, i)
	}
	if t.split > 0 && r.TotalPackets() >= t.split {
		t.emit(e, EndSplit)
	}
}

// find returns the entry of the flow of k, the key of packet p, started
// if the table holds none, and whether k is the canonical key reversed;
// it notes k as the last packet's key. It may change *k.
func (t *Table) find(k *Key, p Packet) (int32, bool) {
	t.lastKey = *k
	swapped := !k.ordered()
	if swapped {
		k.Src, k.Dst, k.SrcPort, k.DstPort = k.Dst, k.Src, k.DstPort, k.SrcPort
	}
	t.lastSwapped = swapped
	h := k.hash()
	i, ok := t.index.lookup(t.entries, k, h)
	if ok && synOnly(p) && t.entries[i].done {
		// A new connection on the ports of one that ended.
		t.end(i, EndOpen)
		ok = false
	}
	if !ok {
		i = t.start(k, h, swapped)
	}
	return i, swapped
}

// reverse makes the responder the initiator.
func (e *entry) reverse() {
	e.rev = !e.rev
	r := &e.rec
	r.Key = r.Key.Reverse()
	r.Packets[0], r.Packets[1] = r.Packets[1], r.Packets[0]
	r.Bytes[0], r.Bytes[1] = r.Bytes[1], r.Bytes[0]
	r.Captured[0], r.Captured[1] = r.Captured[1], r.Captured[0]
	r.TCPFlags[0], r.TCPFlags[1] = r.TCPFlags[1], r.TCPFlags[0]
	e.fin[0], e.fin[1] = e.fin[1], e.fin[0]
}

// start adds the flow of canonical key ck, its initiator the packet's
// sender (swapped: the canonical Dst), and returns its entry.
func (t *Table) start(ck *Key, h uint64, swapped bool) int32 {
	if t.index.n >= t.cfg.MaxFlows {
		l := &t.open
		if t.done.head >= 0 {
			l = &t.done
		}
		t.c.Evicted++
		t.end(l.head, EndEvicted)
	}
	var i int32
	if n := len(t.free); n > 0 {
		i = t.free[n-1]
		t.free = t.free[:n-1]
	} else {
		t.entries = append(t.entries, entry{})
		t.links = append(t.links, link{-1, -1})
		i = int32(len(t.entries) - 1)
	}
	e := &t.entries[i]
	*e = entry{ckey: *ck, hash: h, rev: swapped}
	e.rec.Key = *ck
	if swapped {
		e.rec.Key = ck.Reverse()
	}
	t.index.insert(t.entries, i, h)
	t.push(&t.open, i)
	t.c.Flows++
	return i
}

// emit appends the record of e, ended by end unless it ended by FIN or
// RST, and starts its next part. A record without packets (a flow that
// saw none since the last emit) is not written.
func (t *Table) emit(e *entry, end End) {
	r := &e.rec
	if r.TotalPackets() > 0 {
		out := *r
		if !e.done || end == EndSplit {
			out.End = end
		}
		t.out = append(t.out, out)
		t.c.Records++
		r.Part++
	}
	r.Packets, r.Bytes, r.Captured, r.TCPFlags = [2]uint64{}, [2]uint64{}, [2]uint64{}, [2]uint8{}
	r.NRuns = 0
}

// end emits the record of entry i and forgets the flow.
func (t *Table) end(i int32, why End) {
	e := &t.entries[i]
	t.emit(e, why)
	if e.done {
		t.unlink(&t.done, i)
	} else {
		t.unlink(&t.open, i)
	}
	t.index.remove(t.entries, i, e.hash)
	t.free = append(t.free, i)
	if t.last == i {
		t.last = -1
	}
}

// expire ends the flows idle at t.now.
func (t *Table) expire() {
	for t.open.head >= 0 && t.entries[t.open.head].rec.Last < t.now-t.idle {
		t.end(t.open.head, EndIdle)
	}
	for t.done.head >= 0 && t.entries[t.done.head].rec.Last < t.now-t.closed {
		t.end(t.done.head, EndIdle)
	}
	// Last + a timeout wraps below zero only for times near the end of
	// int64: then every packet checks, as if nothing were known.
	t.expireAt = math.MaxInt64
	if h := t.open.head; h >= 0 {
		t.expireAt = t.entries[h].rec.Last + t.idle
	}
	if h := t.done.head; h >= 0 {
		t.expireAt = min(t.expireAt, t.entries[h].rec.Last+t.closed)
	}
}

// Expire ends the flows idle at now (Unix ns), for a caller with a clock
// when packets stop coming. A now before the latest packet's time
// changes nothing.
func (t *Table) Expire(now int64) {
	t.settle()
	if now > t.now {
		t.now = now
		t.expire()
	}
}

// Rotate writes a record (EndOpen) of every flow held, as its data file
// closes, and keeps the flows: their next records, in the next file,
// have the next Part. Flows ended by FIN or RST keep that end. Every
// record in Records after Rotate holds packets of the closing file only:
// the caller writes them (and its end record) to that file's flow file
// and calls Clear before it adds the next file's first packet, whose
// block numbers start again at 0.
func (t *Table) Rotate() {
	t.settle()
	for _, l := range []*list{&t.done, &t.open} {
		for i := l.head; i >= 0; i = t.links[i].next {
			t.emit(&t.entries[i], EndOpen)
		}
	}
}

// Flush writes a record of every flow held (EndOpen, or FIN or RST) and
// forgets them all.
func (t *Table) Flush() {
	t.settle()
	for t.done.head >= 0 {
		t.end(t.done.head, EndOpen)
	}
	for t.open.head >= 0 {
		t.end(t.open.head, EndOpen)
	}
}

// Records returns the records ended since the last Clear, in the order
// they ended. The slice is valid until the next call of another method.
func (t *Table) Records() []Record { return t.out }

// Clear forgets Records, once the caller wrote them.
func (t *Table) Clear() { t.out = t.out[:0] }

// Len returns the flows held.
func (t *Table) Len() int { return t.index.n }

// Counters returns the table's totals.
func (t *Table) Counters() Counters {
	t.settle()
	return t.c
}

func (t *Table) push(l *list, i int32) {
	e := &t.links[i]
	e.prev, e.next = l.tail, -1
	if l.tail >= 0 {
		t.links[l.tail].next = i
	} else {
		l.head = i
		t.expireAt = math.MinInt64
	}
	l.tail = i
}

func (t *Table) unlink(l *list, i int32) {
	e := &t.links[i]
	if e.prev >= 0 {
		t.links[e.prev].next = e.next
	} else {
		l.head = e.next
		t.expireAt = math.MinInt64
	}
	if e.next >= 0 {
		t.links[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

// touch moves entry i to the end of l (most recently active).
func (t *Table) touch(l *list, i int32) {
	if l.tail == i {
		return
	}
	t.unlink(l, i)
	t.push(l, i)
}

// Run sums, for a caller, packets of the table's current run that
// AddRepeat would take, to hand them over in one AddRepeats (the
// store's write path: a packet then costs a few comparisons and sums,
// no call into the table). Take a packet with Take; before any other
// call to the table, Settle; after it, Renew.
type Run struct {
	ok                 bool
	lim                Repeats
	n, bytes, captured uint64
	first, last        int64
	flags              uint8
}

// Take sums a packet on interface iface in index block block, of
// captured bytes data and wire length wireLen, if same (its headers
// are the last packet's, flow.Key-wise) and it is within the limits the
// table gave at Renew; false leaves it to the table.
func (r *Run) Take(same bool, iface, block uint32, ts int64, wireLen uint32, data []byte) bool {
	capLen := uint64(len(data))
	if !(same && r.ok && iface == r.lim.Iface && block == r.lim.Block && r.n < r.lim.Room && capLen >= 48 &&
		(ts <= r.lim.Safe || ts <= r.last) && (!r.lim.TCP || data[47]&(TCPSyn|TCPFin|TCPRst) == 0)) {
		return false
	}
	if r.lim.TCP {
		r.flags |= data[47]
	}
	r.n++
	r.bytes += max(uint64(wireLen), capLen)
	r.captured += capLen
	r.first, r.last = min(r.first, ts), max(r.last, ts)
	return true
}

// Settle hands t what r summed; r takes nothing more until Renew.
func (r *Run) Settle(t *Table) {
	if r.n > 0 {
		t.AddRepeats(r.n, r.bytes, r.captured, r.first, r.last, r.flags)
	}
	*r = Run{}
}

// Renew lets r sum the packets t's run would take next.
func (r *Run) Renew(t *Table) {
	r.lim, r.ok = t.Repeats()
	r.first, r.last = math.MaxInt64, r.lim.Last
}
