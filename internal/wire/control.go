package wire

import (
	"encoding/binary"
	"fmt"
)

// Control payloads, integers little-endian; str8 is a u8 length and that
// many bytes, str16 a u16 length and bytes.
//
// Hello (agent -> collector, first frame on a connection):
//
//	instance [16] | codecs u32 | name str8 | host str8 | token str8 |
//	nif u16 | nif x Interface
//
// token is the collector's shared secret, 0 to MaxTokenLen bytes, empty
// when the agent has none; sent only over TLS unless both sides were
// told to run insecure.
//
// Interface (in Hello, and the body of an Iface frame after its index):
//
//	name str8 | link type u16 | snaplen u32
//
// Iface (agent -> collector, declares interface nif, the next index):
//
//	index u32 | Interface
//
// Welcome (collector -> agent, accepts the Hello):
//
//	last seq u64 | max frame u32 | codecs u32
//
// Reject (collector -> agent, then the collector closes): reason str16
//
// Ack (collector -> agent): seq u64, every batch <= seq is written. The
// collector re-sends its last Ack as a heartbeat when it has sent nothing
// for a while; an Ack is idempotent.
//
// Ping (agent -> collector): empty payload, the agent's heartbeat when it
// has sent nothing for a while.
//
// Bye (agent -> collector, UDP only): empty payload, the agent's
// goodbye: the collector closes the agent's file. Over TCP the goodbye is
// the end of the stream.
//
// Stats (agent -> collector, cumulative counters since the agent started):
//
//	time i64 | agent drops u64 | n u16 | n x (index u32 | received u64 |
//	kernel drops u64 | queue freezes u64 | captured u64)

// Interface describes one captured interface.
type Interface struct {
	Name     string
	LinkType uint16 // LINKTYPE_* value, as in pcap and pcapng
	SnapLen  uint32
}

// Hello opens a session. Instance identifies one run of an agent: batch
// sequence numbers are per instance.
type Hello struct {
	Instance   [16]byte
	Codecs     uint32 // bit n set: the agent can send Codec n
	Name       string // the agent's name; see ValidateName
	Host       string // the host it runs on, informational
	Token      string // shared secret, at most MaxTokenLen bytes; "" for none
	Interfaces []Interface
}

// Welcome accepts a Hello.
type Welcome struct {
	LastSeq  uint64 // highest batch sequence already held for the instance
	MaxFrame uint32 // largest frame payload the collector accepts
	Codecs   uint32 // codecs the collector accepts
}

// IfaceStats are one interface's cumulative counters.
type IfaceStats struct {
	Index        uint32
	Received     uint64 // seen by the kernel socket (PACKET_STATISTICS tp_packets)
	KernelDrops  uint64 // dropped by the kernel: ring full (tp_drops)
	QueueFreezes uint64 // TPACKET_V3 queue freezes
	Captured     uint64 // read from the ring by the agent
}

// Stats is an agent's periodic report of what it lost and where.
type Stats struct {
	Time       int64  // Unix ns when taken
	AgentDrops uint64 // packets the agent dropped because its queue was full
	Interfaces []IfaceStats
}

// Limits on control payload contents.
const (
	MaxInterfaces = 1024
	MaxReason     = 1024
	MaxTokenLen   = 128
	ifaceMinSize  = 1 + 2 + 4
	statsIfSize   = 4 + 8*4
)

// AppendHello appends a whole Hello frame to dst.
func AppendHello(dst []byte, h *Hello) []byte {
	return appendFrame(dst, TypeHello, func(b []byte) []byte {
		b = append(b, h.Instance[:]...)
		b = binary.LittleEndian.AppendUint32(b, h.Codecs)
		b = appendStr8(b, h.Name)
		b = appendStr8(b, h.Host)
		b = appendStr8(b, h.Token)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(h.Interfaces)))
		for i := range h.Interfaces {
			b = appendInterface(b, &h.Interfaces[i])
		}
		return b
	})
}

// AppendRecordHello appends the Hello frame a Kafka record carries
// (docs/wire-format.md, "Kafka records"): h with ifaces as its
// interfaces and without its token, so that no shared secret reaches
// Kafka. Ingest collectors and agents producing straight to Kafka both
// build it here.
func AppendRecordHello(dst []byte, h *Hello, ifaces []Interface) []byte {
	hc := *h
	hc.Interfaces, hc.Token = ifaces, ""
	return AppendHello(dst, &hc)
}

// ParseHello decodes a Hello payload. It checks structure and limits;
// the name's policy is ValidateName's.
func ParseHello(p []byte) (Hello, error) {
	var h Hello
	d := decoder{b: p}
	copy(h.Instance[:], d.bytes(16))
	h.Codecs = d.u32()
	h.Name = d.str8()
	h.Host = d.str8()
	h.Token = d.str8()
	if d.err == nil && len(h.Token) > MaxTokenLen {
		return h, fmt.Errorf("hello: token of %d bytes over limit %d: %w", len(h.Token), MaxTokenLen, ErrTooLarge)
	}
	n := int(d.u16())
	if d.err == nil && n > MaxInterfaces {
		return h, fmt.Errorf("hello: %d interfaces over limit %d: %w", n, MaxInterfaces, ErrTooLarge)
	}
	if d.err == nil && n*ifaceMinSize > len(d.b) {
		return h, fmt.Errorf("hello: %d interfaces cannot fit in %d bytes: %w", n, len(d.b), ErrTruncated)
	}
	if d.err == nil && n > 0 {
		h.Interfaces = make([]Interface, n)
		for i := range h.Interfaces {
			h.Interfaces[i] = d.iface()
		}
	}
	if err := d.done(); err != nil {
		return h, fmt.Errorf("hello: %w", err)
	}
	return h, nil
}

// AppendIface appends an Iface frame declaring interface index.
func AppendIface(dst []byte, index uint32, ifc *Interface) []byte {
	return appendFrame(dst, TypeIface, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint32(b, index)
		return appendInterface(b, ifc)
	})
}

// ParseIface decodes an Iface payload.
func ParseIface(p []byte) (uint32, Interface, error) {
	d := decoder{b: p}
	idx := d.u32()
	ifc := d.iface()
	if err := d.done(); err != nil {
		return 0, ifc, fmt.Errorf("iface: %w", err)
	}
	return idx, ifc, nil
}

// AppendWelcome appends a Welcome frame.
func AppendWelcome(dst []byte, w Welcome) []byte {
	return appendFrame(dst, TypeWelcome, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint64(b, w.LastSeq)
		b = binary.LittleEndian.AppendUint32(b, w.MaxFrame)
		return binary.LittleEndian.AppendUint32(b, w.Codecs)
	})
}

// ParseWelcome decodes a Welcome payload.
func ParseWelcome(p []byte) (Welcome, error) {
	d := decoder{b: p}
	w := Welcome{LastSeq: d.u64(), MaxFrame: d.u32(), Codecs: d.u32()}
	if err := d.done(); err != nil {
		return w, fmt.Errorf("welcome: %w", err)
	}
	return w, nil
}

// AppendReject appends a Reject frame; the reason is cut to MaxReason.
func AppendReject(dst []byte, reason string) []byte {
	if len(reason) > MaxReason {
		reason = reason[:MaxReason]
	}
	return appendFrame(dst, TypeReject, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(reason)))
		return append(b, reason...)
	})
}

// ParseReject decodes a Reject payload.
func ParseReject(p []byte) (string, error) {
	d := decoder{b: p}
	n := int(d.u16())
	if d.err == nil && n > MaxReason {
		return "", fmt.Errorf("reject: reason of %d bytes over limit %d: %w", n, MaxReason, ErrTooLarge)
	}
	s := string(d.bytes(n))
	if err := d.done(); err != nil {
		return "", fmt.Errorf("reject: %w", err)
	}
	return s, nil
}

// AppendAck appends an Ack frame for every batch up to seq.
func AppendAck(dst []byte, seq uint64) []byte {
	dst = AppendHeader(dst, TypeAck, 0, 8)
	return binary.LittleEndian.AppendUint64(dst, seq)
}

// ParseAck decodes an Ack payload.
func ParseAck(p []byte) (uint64, error) {
	if len(p) != 8 {
		return 0, fmt.Errorf("ack: %d bytes, want 8: %w", len(p), ErrMalformed)
	}
	return binary.LittleEndian.Uint64(p), nil
}

// AppendPing appends a Ping frame.
func AppendPing(dst []byte) []byte { return AppendHeader(dst, TypePing, 0, 0) }

// ParsePing checks a Ping payload, which must be empty.
func ParsePing(p []byte) error { return parseEmpty(TypePing, p) }

// AppendBye appends a Bye frame.
func AppendBye(dst []byte) []byte { return AppendHeader(dst, TypeBye, 0, 0) }

// ParseBye checks a Bye payload, which must be empty.
func ParseBye(p []byte) error { return parseEmpty(TypeBye, p) }

func parseEmpty(t Type, p []byte) error {
	if len(p) != 0 {
		return fmt.Errorf("%s: %d bytes, want 0: %w", t, len(p), ErrMalformed)
	}
	return nil
}

// AppendStats appends a Stats frame.
func AppendStats(dst []byte, s *Stats) []byte {
	return appendFrame(dst, TypeStats, func(b []byte) []byte {
		b = binary.LittleEndian.AppendUint64(b, uint64(s.Time))
		b = binary.LittleEndian.AppendUint64(b, s.AgentDrops)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(s.Interfaces)))
		for _, st := range s.Interfaces {
			b = binary.LittleEndian.AppendUint32(b, st.Index)
			b = binary.LittleEndian.AppendUint64(b, st.Received)
			b = binary.LittleEndian.AppendUint64(b, st.KernelDrops)
			b = binary.LittleEndian.AppendUint64(b, st.QueueFreezes)
			b = binary.LittleEndian.AppendUint64(b, st.Captured)
		}
		return b
	})
}

// ParseStats decodes a Stats payload into s, reusing s.Interfaces.
func ParseStats(p []byte, s *Stats) error {
	d := decoder{b: p}
	s.Time = int64(d.u64())
	s.AgentDrops = d.u64()
	n := int(d.u16())
	if d.err == nil && n*statsIfSize != len(d.b) {
		return fmt.Errorf("stats: %d interfaces in %d bytes: %w", n, len(d.b), ErrMalformed)
	}
	s.Interfaces = s.Interfaces[:0]
	for range n {
		s.Interfaces = append(s.Interfaces, IfaceStats{
			Index: d.u32(), Received: d.u64(), KernelDrops: d.u64(), QueueFreezes: d.u64(), Captured: d.u64(),
		})
	}
	if err := d.done(); err != nil {
		return fmt.Errorf("stats: %w", err)
	}
	return nil
}

// appendFrame appends a header with a placeholder length, the payload
// body writes, and then patches the length.
func appendFrame(dst []byte, t Type, body func([]byte) []byte) []byte {
	start := len(dst)
	dst = AppendHeader(dst, t, 0, 0)
	dst = body(dst)
	binary.LittleEndian.PutUint32(dst[start+4:], uint32(len(dst)-start-HeaderSize))
	return dst
}

func appendStr8(b []byte, s string) []byte {
	if len(s) > 255 {
		s = s[:255]
	}
	return append(append(b, byte(len(s))), s...)
}

func appendInterface(b []byte, ifc *Interface) []byte {
	b = appendStr8(b, ifc.Name)
	b = binary.LittleEndian.AppendUint16(b, ifc.LinkType)
	return binary.LittleEndian.AppendUint32(b, ifc.SnapLen)
}

// decoder reads fixed fields from a payload; the first shortfall sets
// err and every later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = fmt.Errorf("need %d bytes, %d left: %w", n, len(d.b), ErrTruncated)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) str8() string {
	n := d.bytes(1)
	if n == nil {
		return ""
	}
	return string(d.bytes(int(n[0])))
}

func (d *decoder) iface() Interface {
	return Interface{Name: d.str8(), LinkType: d.u16(), SnapLen: d.u32()}
}

func (d *decoder) done() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes: %w", len(d.b), ErrMalformed)
	}
	return d.err
}
