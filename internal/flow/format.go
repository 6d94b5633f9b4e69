package flow

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"strings"
)

// A flow file (Version 1) holds the flow records of one data file; all
// integers little-endian, "uv" an unsigned LEB128 varint (at most 10
// bytes, encoding/binary's Uvarint):
//
//	header:
//	  0  magic      "PSFL"
//	  4  version    u8 (1)
//	  5  reserved   u8 (0)
//	  6  nameLen    u16 (at most MaxNameLen)
//	  8  name       [nameLen]: the data file's final name (no directory, no ".part")
//	  .. crc        u32: CRC-32C of the header's bytes before it
//	records, each:
//	  0  kind       u8 ('F' flow, 'E' end)
//	  1  len        u32: payload bytes (at most maxPayload)
//	  5  payload    [len]
//	  .. crc        u32: CRC-32C of kind, len and payload, seeded with the
//	                previous record's crc (the first record: the header's)
//	flow payload ('F'):
//	  0  kind       u8: Kind (0 none, 1 ip4, 2 ip6, 3 link)
//	  1  keyFlags   u8: FlagPorts 1, FlagOneWay 2, FlagFragment 4, FlagCut 8
//	  2  flags      u8: RecordSYN 1
//	  3  end        u8: End (0 open, 1 fin, 2 rst, 3 idle, 4 split, 5 evicted)
//	  4  proto      u8
//	  5  nvlan      u8 (0 to 2)
//	  6  nruns      u8 (0 to 4)
//	  7  tcpFlags   [2]u8: initiator's, responder's
//	  9  etherType  u16
//	  11 iface      u32
//	  15 part       u32
//	  19 srcPort    u16 (0 without FlagPorts)
//	  21 dstPort    u16
//	  23 first      i64: Unix ns
//	  31 vlan       [nvlan]u16 (12-bit ids)
//	  .. src, dst   [n]u8 each: n 0 (none), 4 (ip4), 16 (ip6), 6 (link: MAC)
//	  .. runs       [nruns](uv first block, uv last-first)
//	  .. counts     uv last-first (ns), uv packets[0], uv packets[1],
//	                uv bytes[0], uv bytes[1], uv captured[0], uv captured[1]
//	end payload ('E'), the last record once the data file is closed:
//	  0  records    u64: flow records before it (must match)
//	  8  evicted    u64: flows the writer ended early (EndEvicted)
//
// Records follow the order flows ended, not their start. The chained
// checksums make the last record's crc a checksum over the whole file:
// it is valid up to the first record that does not verify and, for a
// closed data file, only whole with its end record. Changing the layout
// or the meaning of a field takes a new Version; readers refuse
// versions and record kinds they do not know.
const (
	// Version is the version of the flow files written.
	Version = 1
	// MaxNameLen bounds a data file name in the header.
	MaxNameLen = 1024

	headerFixed = 8
	recHead     = 5
	recTail     = 4
	flowFixed   = 31
	endSize     = 16
	// maxPayload bounds a flow record's payload: the fixed part, two
	// VLAN ids, two IPv6 addresses, the runs and the counts as varints
	// of at most 10 bytes.
	maxPayload = flowFixed + 2*MaxVLANs + 2*16 + MaxBlockRuns*2*5 + 7*binary.MaxVarintLen64

	kindFlow = 'F'
	kindEnd  = 'E'
)

var magic = [4]byte{'P', 'S', 'F', 'L'}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Suffix is what a data file's name takes to name its flow file:
// web1_20260101T000000.000Z.pcapng.flows beside
// web1_20260101T000000.000Z.pcapng; that of a file being written
// (".part") is <final name>.flows.part.
const Suffix = ".flows"

const partSuffix = ".part"

// Path returns the path of the flow file of the data file at dataPath,
// which may end in ".part".
func Path(dataPath string) string {
	if base, ok := strings.CutSuffix(dataPath, partSuffix); ok {
		return base + Suffix + partSuffix
	}
	return dataPath + Suffix
}

// Encoder encodes a flow file: AppendHeader once, then AppendRecord per
// record and AppendEnd when the data file closes. It appends to the
// caller's slice and does not allocate beyond growing it. The zero
// value is ready for AppendHeader; an Encoder is not safe for
// concurrent use.
type Encoder struct {
	crc     uint32
	records uint64
}

// AppendHeader appends the header of the flow file of data file name
// (its final name, cut to MaxNameLen bytes) and starts the chain.
func (e *Encoder) AppendHeader(dst []byte, name string) []byte {
	name = name[:min(len(name), MaxNameLen)]
	start := len(dst)
	dst = append(dst, magic[:]...)
	dst = append(dst, Version, 0)
	dst = binary.LittleEndian.AppendUint16(dst, uint16(len(name)))
	dst = append(dst, name...)
	e.crc = crc32.Checksum(dst[start:], castagnoli)
	e.records = 0
	return binary.LittleEndian.AppendUint32(dst, e.crc)
}

// AppendRecord appends the record r.
func (e *Encoder) AppendRecord(dst []byte, r *Record) []byte {
	le := binary.LittleEndian
	start := len(dst)
	k := &r.Key
	nv, nr := min(int(k.NVLAN), MaxVLANs), min(int(r.NRuns), MaxBlockRuns)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = append(dst, byte(k.Kind), k.Flags, r.Flags, byte(r.End), k.Proto, byte(nv), byte(nr), r.TCPFlags[0], r.TCPFlags[1])
	dst = le.AppendUint16(dst, k.EtherType)
	dst = le.AppendUint32(dst, k.Iface)
	dst = le.AppendUint32(dst, r.Part)
	dst = le.AppendUint16(dst, k.SrcPort)
	dst = le.AppendUint16(dst, k.DstPort)
	dst = le.AppendUint64(dst, uint64(r.First))
	for _, v := range k.VLAN[:nv] {
		dst = le.AppendUint16(dst, v)
	}
	n := k.addrLen()
	dst = append(dst, k.Src[:n]...)
	dst = append(dst, k.Dst[:n]...)
	for _, b := range r.Blocks[:nr] {
		dst = binary.AppendUvarint(dst, uint64(b.First))
		dst = binary.AppendUvarint(dst, uint64(b.Last-b.First))
	}
	dst = binary.AppendUvarint(dst, uint64(r.Last)-uint64(r.First)) // no overflow whatever the times
	for _, v := range [...]uint64{r.Packets[0], r.Packets[1], r.Bytes[0], r.Bytes[1], r.Captured[0], r.Captured[1]} {
		dst = binary.AppendUvarint(dst, v)
	}
	e.records++
	return e.seal(dst, start, kindFlow)
}

// AppendEnd appends the end record: evicted flows ended early by the
// table's bound while the data file was written.
func (e *Encoder) AppendEnd(dst []byte, evicted uint64) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	dst = binary.LittleEndian.AppendUint64(dst, e.records)
	dst = binary.LittleEndian.AppendUint64(dst, evicted)
	return e.seal(dst, start, kindEnd)
}

func (e *Encoder) seal(dst []byte, start int, kind byte) []byte {
	dst[start] = kind
	binary.LittleEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-recHead))
	e.crc = crc32.Update(e.crc, castagnoli, dst[start:])
	return binary.LittleEndian.AppendUint32(dst, e.crc)
}

// Header is what a flow file's header says.
type Header struct {
	Version int
	Name    string // the data file's final name
}

// Decoder reads a flow file held in memory, record by record, checking
// every length against the bytes left and every checksum before it
// uses a byte: the file is hostile input. It keeps a reference to the
// bytes, not to the records it returns.
type Decoder struct {
	Header
	b       []byte
	off     int
	crc     uint32
	records uint64
	final   bool
	evicted uint64
	err     error
}

// NewDecoder reads the header of the flow file b: ErrVersion for a
// version it does not read, ErrDamaged for anything else that does not
// verify.
func NewDecoder(b []byte) (*Decoder, error) {
	if len(b) < headerFixed+recTail || [4]byte(b[:4]) != magic {
		return nil, fmt.Errorf("flow file header: %w", ErrDamaged)
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > MaxNameLen || len(b) < headerFixed+n+recTail {
		return nil, fmt.Errorf("flow file header: name of %d bytes: %w", n, ErrDamaged)
	}
	end := headerFixed + n
	crc := crc32.Checksum(b[:end], castagnoli)
	if binary.LittleEndian.Uint32(b[end:]) != crc {
		return nil, fmt.Errorf("flow file header: checksum: %w", ErrDamaged)
	}
	if b[4] != Version {
		return nil, fmt.Errorf("flow file version %d: %w", b[4], ErrVersion)
	}
	if b[5] != 0 {
		return nil, fmt.Errorf("flow file header: reserved byte %d: %w", b[5], ErrDamaged)
	}
	return &Decoder{Header: Header{Version: int(b[4]), Name: string(b[8:end])},
		b: b, off: end + recTail, crc: crc}, nil
}

// Next decodes the next flow record into r; false at the end record, at
// the end of the bytes, or at the first record that does not verify
// (Err says which).
func (d *Decoder) Next(r *Record) bool {
	if d.err != nil || d.final || d.off == len(d.b) {
		return false
	}
	rest := d.b[d.off:]
	if len(rest) < recHead+recTail {
		return d.fail("record header cut short")
	}
	kind := rest[0]
	n := binary.LittleEndian.Uint32(rest[1:])
	if n > maxPayload || uint64(len(rest)) < uint64(recHead+recTail)+uint64(n) {
		return d.fail("record length %d", n)
	}
	end := recHead + int(n)
	crc := crc32.Update(d.crc, castagnoli, rest[:end])
	if binary.LittleEndian.Uint32(rest[end:]) != crc {
		return d.fail("record checksum")
	}
	payload := rest[recHead:end:end]
	switch kind {
	case kindFlow:
		if err := decodeRecord(r, payload); err != nil {
			return d.fail("flow record %d: %s", d.records, err)
		}
	case kindEnd:
		if len(payload) != endSize {
			return d.fail("end record of %d bytes", len(payload))
		}
		if got := binary.LittleEndian.Uint64(payload); got != d.records {
			return d.fail("end record counts %d records, %d read", got, d.records)
		}
		d.evicted = binary.LittleEndian.Uint64(payload[8:])
		d.final = true
	default:
		return d.fail("record kind %#x", kind)
	}
	d.crc = crc
	d.off += end + recTail
	if kind == kindEnd {
		if d.off != len(d.b) {
			d.err = fmt.Errorf("flow file: %d bytes after the end record: %w", len(d.b)-d.off, ErrDamaged)
		}
		return false
	}
	d.records++
	return true
}

func (d *Decoder) fail(format string, args ...any) bool {
	d.err = fmt.Errorf("flow file at offset %d: %s: %w", d.off, fmt.Sprintf(format, args...), ErrDamaged)
	return false
}

// Err returns the error that stopped Next (nil at a clean end: the end
// record, or the end of the bytes of a file still being written).
func (d *Decoder) Err() error { return d.err }

// Final reports whether Next reached the end record; Evicted is what it
// counts.
func (d *Decoder) Final() (evicted uint64, ok bool) { return d.evicted, d.final }

// decodeRecord decodes a flow payload p into r and checks every field.
func decodeRecord(r *Record, p []byte) error {
	le := binary.LittleEndian
	if len(p) < flowFixed {
		return fmt.Errorf("%d bytes", len(p))
	}
	*r = Record{}
	k := &r.Key
	k.Kind, k.Flags, r.Flags, r.End, k.Proto = Kind(p[0]), p[1], p[2], End(p[3]), p[4]
	nv, nr := int(p[5]), int(p[6])
	r.TCPFlags = [2]uint8{p[7], p[8]}
	k.EtherType = le.Uint16(p[9:])
	k.Iface = le.Uint32(p[11:])
	r.Part = le.Uint32(p[15:])
	k.SrcPort, k.DstPort = le.Uint16(p[19:]), le.Uint16(p[21:])
	r.First = int64(le.Uint64(p[23:]))
	switch {
	case k.Kind > KindLink:
		return fmt.Errorf("kind %d", k.Kind)
	case k.Flags&^(FlagPorts|FlagOneWay|FlagFragment|FlagCut) != 0 || r.Flags&^RecordSYN != 0:
		return fmt.Errorf("flags %#x %#x", k.Flags, r.Flags)
	case r.End >= endCount:
		return fmt.Errorf("end %d", r.End)
	case nv > MaxVLANs || nr > MaxBlockRuns:
		return fmt.Errorf("%d vlans, %d runs", nv, nr)
	case k.Flags&FlagPorts == 0 && (k.SrcPort != 0 || k.DstPort != 0):
		return fmt.Errorf("ports without FlagPorts")
	case k.Kind == KindIPv4 && k.EtherType != EtherIPv4, k.Kind == KindIPv6 && k.EtherType != EtherIPv6:
		return fmt.Errorf("kind %v with ethertype %#04x", k.Kind, k.EtherType)
	case k.Kind < KindIPv4 || k.Kind > KindIPv6:
		if k.Proto != 0 || k.Flags&(FlagPorts|FlagOneWay|FlagFragment) != 0 {
			return fmt.Errorf("%v key with IP fields", k.Kind)
		}
	}
	p = p[flowFixed:]
	k.NVLAN = uint8(nv)
	for i := range nv {
		if len(p) < 2 {
			return fmt.Errorf("vlan cut short")
		}
		if k.VLAN[i] = le.Uint16(p); k.VLAN[i] > 0x0fff {
			return fmt.Errorf("vlan id %d", k.VLAN[i])
		}
		p = p[2:]
	}
	n := k.addrLen()
	if len(p) < 2*n {
		return fmt.Errorf("addresses cut short")
	}
	copy(k.Src[:n], p)
	copy(k.Dst[:n], p[n:])
	p = p[2*n:]
	var v [2 * MaxBlockRuns]uint64
	if err := uvarints(&p, v[:2*nr]); err != nil {
		return fmt.Errorf("block runs: %w", err)
	}
	next := uint64(0)
	for i := range nr {
		first, length := v[2*i], v[2*i+1]
		if first < next || first > math.MaxUint32 || length > math.MaxUint32-first {
			return fmt.Errorf("block run %d: %d+%d", i, first, length)
		}
		r.Blocks[i] = BlockRun{uint32(first), uint32(first + length)}
		next = first + length + 2 // runs do not touch
	}
	r.NRuns = uint8(nr)
	var c [7]uint64
	if err := uvarints(&p, c[:]); err != nil {
		return fmt.Errorf("counts: %w", err)
	}
	if len(p) != 0 {
		return fmt.Errorf("%d bytes left", len(p))
	}
	// last - first as unsigned: a sum past MaxInt64 wraps below first.
	if r.Last = int64(uint64(r.First) + c[0]); r.Last < r.First {
		return fmt.Errorf("duration %d", c[0])
	}
	r.Packets = [2]uint64{c[1], c[2]}
	r.Bytes = [2]uint64{c[3], c[4]}
	r.Captured = [2]uint64{c[5], c[6]}
	for i := range 2 {
		// Never more captured than wire bytes, no bytes without packets.
		if r.Captured[i] > r.Bytes[i] || r.Packets[i] == 0 && r.Bytes[i] != 0 {
			return fmt.Errorf("direction %d: %d packets, %d bytes, %d captured", i, r.Packets[i], r.Bytes[i], r.Captured[i])
		}
	}
	if r.Packets[0] == 0 && r.Packets[1] == 0 {
		return fmt.Errorf("no packets")
	}
	return nil
}

// uvarints reads len(v) varints from *p.
func uvarints(p *[]byte, v []uint64) error {
	for i := range v {
		x, n := binary.Uvarint(*p)
		if n <= 0 {
			return fmt.Errorf("varint %d malformed", i)
		}
		v[i], *p = x, (*p)[n:]
	}
	return nil
}

// File is a flow file read whole.
type File struct {
	Header
	Records []Record
	Final   bool   // the end record was read
	Evicted uint64 // what the end record counts
}

// Parse reads a whole flow file. It returns the records that verify and
// the first error: ErrDamaged for a record that does not verify (the
// records before it are returned), ErrVersion, or nil. Final tells
// whether the end record was there: the flow file of a closed data file
// without it is incomplete (the writer stopped). Memory is bounded by
// len(b): a record takes at least 40 bytes of b.
func Parse(b []byte) (*File, error) {
	d, err := NewDecoder(b)
	if err != nil {
		return nil, err
	}
	f := &File{Header: d.Header}
	var r Record
	for d.Next(&r) {
		f.Records = append(f.Records, r)
	}
	f.Evicted, f.Final = d.Final()
	return f, d.Err()
}
