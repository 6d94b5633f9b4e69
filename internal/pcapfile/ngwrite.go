package pcapfile

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// SectionInfo holds the Section Header Block options NgWriter writes.
// Empty fields are omitted.
type SectionInfo struct {
	Hardware string // shb_hardware
	OS       string // shb_os
	UserAppl string // shb_userappl
	Comment  string // opt_comment
}

// InterfaceStats is one Interface Statistics Block. Counters whose Have
// flag is false are omitted.
type InterfaceStats struct {
	Timestamp int64 // Unix ns, written in the block header

	IfRecv   uint64 // isb_ifrecv: packets received by the interface
	IfDrop   uint64 // isb_ifdrop: packets dropped by the interface
	OsDrop   uint64 // isb_osdrop: packets dropped by the OS / capture
	UsrDeliv uint64 // isb_usrdeliv: packets delivered to the user

	HaveIfRecv, HaveIfDrop, HaveOsDrop, HaveUsrDeliv bool

	Comment string // opt_comment; empty means none
}

// maxEPBData is the largest packet an EPB's 32-bit total length can hold.
const maxEPBData = math.MaxUint32 - minEPBLen - 3

// NgWriter writes a little-endian pcapng stream: one Section Header Block,
// then Interface Description, Enhanced Packet and Interface Statistics
// Blocks. Every interface is written with if_tsresol 9, so timestamps are
// stored exactly in nanoseconds.
//
// NgWriter does not buffer: wrap the destination in a bufio.Writer (and
// flush it) when writing to a file or socket. An error from the
// destination is sticky. An NgWriter is not safe for concurrent use.
type NgWriter struct {
	w       io.Writer
	bw      *bufio.Writer // w when it is one: a packet's pieces are written to it without an interface call each
	rw      Reserver      // w when it is one: a packet is built in its buffer
	n       int64
	err     error
	nIfaces int
	meta    []byte   // reused for SHB, IDB and ISB bodies
	scratch [36]byte // EPB header (28) + padding (<= 3) + trailer (4)
}

// NewNgWriter writes a Section Header Block (section length -1, unknown)
// with si's non-empty fields as options and returns the writer. Options
// longer than 65535 bytes are ErrTooLarge.
func NewNgWriter(w io.Writer, si SectionInfo) (*NgWriter, error) {
	nw := &NgWriter{}
	nw.SetWriter(w)
	b := nw.meta[:0]
	b = binary.LittleEndian.AppendUint32(b, blockSHB)
	b = binary.LittleEndian.AppendUint32(b, 0) // total length, patched below
	b = binary.LittleEndian.AppendUint32(b, byteOrderMagic)
	b = binary.LittleEndian.AppendUint16(b, 1) // major
	b = binary.LittleEndian.AppendUint16(b, 0) // minor
	b = binary.LittleEndian.AppendUint64(b, math.MaxUint64)
	var err error
	b, err = appendStringOpts(b, []stringOpt{
		{optComment, si.Comment},
		{optSHBHardware, si.Hardware},
		{optSHBOS, si.OS},
		{optSHBUserAppl, si.UserAppl},
	})
	if err != nil {
		return nil, fmt.Errorf("pcapfile: writing section header: %w", err)
	}
	if len(b) > 24 { // any option written
		b = appendEndOfOpt(b)
	}
	if err := nw.writeBlock(b); err != nil {
		return nil, err
	}
	return nw, nil
}

// AddInterface writes an Interface Description Block for ifc (if_name and
// if_description when non-empty, if_tsresol 9) and returns the index to pass
// to WritePacket and WriteStats. Indexes count up from 0.
func (w *NgWriter) AddInterface(ifc Interface) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	b := w.meta[:0]
	b = binary.LittleEndian.AppendUint32(b, blockIDB)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint16(b, ifc.LinkType)
	b = binary.LittleEndian.AppendUint16(b, 0)
	b = binary.LittleEndian.AppendUint32(b, ifc.SnapLen)
	var err error
	b, err = appendStringOpts(b, []stringOpt{
		{optIfName, ifc.Name},
		{optIfDescription, ifc.Description},
		{optComment, ifc.Comment},
	})
	if err != nil {
		return 0, fmt.Errorf("pcapfile: writing interface description: %w", err)
	}
	b = binary.LittleEndian.AppendUint16(b, optIfTsresol)
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = append(b, 9, 0, 0, 0)
	b = appendEndOfOpt(b)
	if err := w.writeBlock(b); err != nil {
		return 0, err
	}
	w.nIfaces++
	return w.nIfaces - 1, nil
}

// WritePacket writes an Enhanced Packet Block: data captured on interface
// ifIndex at ts (Unix ns; negative values are stored as their two's
// complement and read back unchanged by this package's Reader), with
// original length origLen. An origLen below len(data) is written as
// len(data). data is not retained. WritePacket does not allocate.
func (w *NgWriter) WritePacket(ifIndex int, ts int64, origLen uint32, data []byte) error {
	return w.writeEPB(ifIndex, ts, origLen, data, nil)
}

// OptCustomBinaryNoCopy is the pcapng option code of a custom binary
// option that rewriters must not copy: its value means something only
// in the file it was written to.
const OptCustomBinaryNoCopy = 19373

// WritePacketCustom is WritePacket with one custom option (code
// OptCustomBinaryNoCopy) holding Private Enterprise Number pen and value
// (at most 1024 bytes). Readers that do not know pen ignore it; unlike a
// custom block, Wireshark and tshark do not show it as a record. It does
// not allocate once the writer's scratch buffer has grown to the option.
func (w *NgWriter) WritePacketCustom(ifIndex int, ts int64, origLen uint32, data []byte, pen uint32, value []byte) error {
	if len(value) > 1024 {
		return fmt.Errorf("pcapfile: custom option of %d bytes: %w", len(value), ErrTooLarge)
	}
	var zero [3]byte
	o := binary.LittleEndian.AppendUint16(w.meta[:0], OptCustomBinaryNoCopy)
	o = binary.LittleEndian.AppendUint16(o, uint16(4+len(value)))
	o = binary.LittleEndian.AppendUint32(o, pen)
	o = append(o, value...)
	o = append(o, zero[:(4-len(value)%4)%4]...)
	o = appendEndOfOpt(o)
	w.meta = o[:0]
	return w.writeEPB(ifIndex, ts, origLen, data, o)
}

// WritePacketComment is WritePacket with a comment (opt_comment), as
// Wireshark shows a packet's comment (frame.comment); at most 65535
// bytes (ErrTooLarge).
func (w *NgWriter) WritePacketComment(ifIndex int, ts int64, origLen uint32, data []byte, comment string) error {
	o, err := appendStringOpts(w.meta[:0], []stringOpt{{optComment, comment}})
	if err != nil {
		return fmt.Errorf("pcapfile: writing packet comment: %w", err)
	}
	if len(o) > 0 {
		o = appendEndOfOpt(o)
	}
	w.meta = o[:0]
	return w.writeEPB(ifIndex, ts, origLen, data, o)
}

// writeEPB writes an Enhanced Packet Block with the already encoded
// options opts (ending in opt_endofopt), or none.
func (w *NgWriter) writeEPB(ifIndex int, ts int64, origLen uint32, data, opts []byte) error {
	if w.err != nil {
		return w.err
	}
	if ifIndex < 0 || ifIndex >= w.nIfaces {
		return fmt.Errorf("pcapfile: writing packet on interface %d: %w", ifIndex, ErrUnknownInterface)
	}
	if uint64(len(data)) > maxEPBData {
		return fmt.Errorf("pcapfile: writing packet of %d bytes: %w", len(data), ErrTooLarge)
	}
	caplen := uint32(len(data))
	pad := -caplen & 3
	total := minEPBLen + caplen + pad + uint32(len(opts))
	h := &w.scratch
	binary.LittleEndian.PutUint32(h[0:], blockEPB)
	binary.LittleEndian.PutUint32(h[4:], total)
	binary.LittleEndian.PutUint32(h[8:], uint32(ifIndex))
	binary.LittleEndian.PutUint32(h[12:], uint32(uint64(ts)>>32))
	binary.LittleEndian.PutUint32(h[16:], uint32(ts))
	binary.LittleEndian.PutUint32(h[20:], caplen)
	binary.LittleEndian.PutUint32(h[24:], max(origLen, caplen))
	if w.rw != nil && len(opts) == 0 {
		if b := w.rw.Reserve(int(total)); b != nil {
			copy(b, h[:28])
			copy(b[28:], data)
			b = b[28+caplen:]
			clear(b[:pad])
			binary.LittleEndian.PutUint32(b[pad:], total)
			w.n += int64(total)
			return nil
		}
	}
	if bw := w.bw; bw != nil && len(opts) == 0 {
		// The common packet: header, data, padding and trailer into
		// the buffer, the error (sticky in a bufio.Writer) checked once.
		binary.LittleEndian.PutUint32(h[28:], 0)
		binary.LittleEndian.PutUint32(h[28+pad:], total)
		n1, _ := bw.Write(h[:28])
		n2, _ := bw.Write(data)
		n3, err := bw.Write(h[28 : 32+pad])
		return w.wrote(n1+n2+n3, int(total), err)
	}
	if err := w.write(h[:28]); err != nil {
		return err
	}
	if err := w.write(data); err != nil {
		return err
	}
	h[28], h[29], h[30] = 0, 0, 0
	if len(opts) > 0 {
		if err := w.write(h[28 : 28+pad]); err != nil {
			return err
		}
		if err := w.write(opts); err != nil {
			return err
		}
		pad = 0
	}
	binary.LittleEndian.PutUint32(h[28+pad:], total)
	return w.write(h[28 : 32+pad])
}

// WriteStats writes an Interface Statistics Block for interface ifIndex,
// with st.Timestamp in the block header and the counters whose Have flag is
// set as options.
func (w *NgWriter) WriteStats(ifIndex int, st InterfaceStats) error {
	if w.err != nil {
		return w.err
	}
	if ifIndex < 0 || ifIndex >= w.nIfaces {
		return fmt.Errorf("pcapfile: writing statistics for interface %d: %w", ifIndex, ErrUnknownInterface)
	}
	b := w.meta[:0]
	b = binary.LittleEndian.AppendUint32(b, blockISB)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, uint32(ifIndex))
	b = binary.LittleEndian.AppendUint32(b, uint32(uint64(st.Timestamp)>>32))
	b = binary.LittleEndian.AppendUint32(b, uint32(st.Timestamp))
	var err error
	b, err = appendStringOpts(b, []stringOpt{{optComment, st.Comment}})
	if err != nil {
		return fmt.Errorf("pcapfile: writing interface statistics: %w", err)
	}
	for _, c := range [...]struct {
		have bool
		code uint16
		v    uint64
	}{
		{st.HaveIfRecv, optISBIfRecv, st.IfRecv},
		{st.HaveIfDrop, optISBIfDrop, st.IfDrop},
		{st.HaveOsDrop, optISBOSDrop, st.OsDrop},
		{st.HaveUsrDeliv, optISBUsrDeliv, st.UsrDeliv},
	} {
		if c.have {
			b = binary.LittleEndian.AppendUint16(b, c.code)
			b = binary.LittleEndian.AppendUint16(b, 8)
			b = binary.LittleEndian.AppendUint64(b, c.v)
		}
	}
	if len(b) > 20 {
		b = appendEndOfOpt(b)
	}
	return w.writeBlock(b)
}

// WriteEmptyNameResolution writes a Name Resolution Block holding no
// record: a valid block that tells a reader nothing (libpcap skips it,
// Wireshark learns no name), for a stream that must send bytes without
// a packet, such as a probe of whether its reader is still there.
func (w *NgWriter) WriteEmptyNameResolution() error {
	if w.err != nil {
		return w.err
	}
	b := w.meta[:0]
	b = binary.LittleEndian.AppendUint32(b, blockNRB)
	b = binary.LittleEndian.AppendUint32(b, 0)
	b = binary.LittleEndian.AppendUint32(b, 0) // nrb_record_end: type 0, length 0
	return w.writeBlock(b)
}

// Written returns the number of bytes written so far, including the
// Section Header Block.
func (w *NgWriter) Written() int64 { return w.n }

// Interfaces returns the number of interfaces added so far.
func (w *NgWriter) Interfaces() int { return w.nIfaces }

// SetWriter makes dst the destination of what is written next: the
// stream continues there, with the same interfaces and byte count (a
// file closed and reopened for append goes on this way). A sticky
// error stays.
func (w *NgWriter) SetWriter(dst io.Writer) {
	w.w = dst
	w.bw, _ = dst.(*bufio.Writer)
	w.rw, _ = dst.(Reserver)
}

// Reserver is a writer that lends its buffer: Reserve returns n bytes
// of it, counted as written, for the caller to fill before its next
// call; nil when it cannot (n beyond its buffer, or an error that its
// next Write returns). NgWriter builds a packet's block there, its
// data copied once.
type Reserver interface {
	Reserve(n int) []byte
}

// writeBlock finishes a block built in w.meta style (header with a zero
// total length, body, no trailer): it appends the trailer, patches the
// length and writes it.
func (w *NgWriter) writeBlock(b []byte) error {
	total := uint32(len(b) + 4)
	binary.LittleEndian.PutUint32(b[4:], total)
	b = binary.LittleEndian.AppendUint32(b, total)
	w.meta = b[:0]
	return w.write(b)
}

// write writes b, counting bytes and making errors sticky.
func (w *NgWriter) write(b []byte) error {
	n, err := w.w.Write(b)
	return w.wrote(n, len(b), err)
}

// wrote counts n bytes written of want, with the error of writing them,
// and makes an error sticky.
func (w *NgWriter) wrote(n, want int, err error) error {
	w.n += int64(n)
	if err == nil && n < want {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = fmt.Errorf("pcapfile: writing pcapng: %w", err)
		return w.err
	}
	return nil
}

type stringOpt struct {
	code uint16
	v    string
}

// appendStringOpts appends the non-empty options, each padded to 4 bytes.
func appendStringOpts(b []byte, opts []stringOpt) ([]byte, error) {
	for _, o := range opts {
		if o.v == "" {
			continue
		}
		if len(o.v) > math.MaxUint16 {
			return b, fmt.Errorf("option %d is %d bytes: %w", o.code, len(o.v), ErrTooLarge)
		}
		b = binary.LittleEndian.AppendUint16(b, o.code)
		b = binary.LittleEndian.AppendUint16(b, uint16(len(o.v)))
		b = append(b, o.v...)
		b = append(b, make([]byte, -len(o.v)&3)...)
	}
	return b, nil
}

func appendEndOfOpt(b []byte) []byte {
	return append(b, 0, 0, 0, 0) // opt_endofopt: code 0, length 0
}

// EPBSize is the number of bytes WritePacket writes for a packet of
// caplen captured bytes.
func EPBSize(caplen int) int64 {
	return int64(minEPBLen + caplen + (-caplen & 3))
}

// InterfaceSize is the number of bytes AddInterface writes for ifc.
func InterfaceSize(ifc Interface) int64 {
	n := int64(minIDBLen) + 8 + 4 // if_tsresol, opt_endofopt
	for _, s := range []string{ifc.Name, ifc.Description, ifc.Comment} {
		if s != "" {
			n += 4 + int64(len(s)+(-len(s)&3))
		}
	}
	return n
}

// StatsSize is the number of bytes WriteStats writes for st.
func StatsSize(st InterfaceStats) int64 {
	n := int64(minISBLen)
	if c := len(st.Comment); c > 0 {
		n += 4 + int64(c+(-c&3))
	}
	for _, h := range []bool{st.HaveIfRecv, st.HaveIfDrop, st.HaveOsDrop, st.HaveUsrDeliv} {
		if h {
			n += 12
		}
	}
	if n > minISBLen {
		n += 4 // opt_endofopt
	}
	return n
}
