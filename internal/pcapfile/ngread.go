package pcapfile

import (
	"encoding/binary"
	"io"
	"math/bits"
)

// pcapng block layout (every field in the section's byte order, given by
// the byte-order magic of the Section Header Block):
//
//	 0                   1                   2                   3
//	+---------------------------------------------------------------+
//	|                          Block Type                           | 0
//	|                      Block Total Length                       | 4
//	/                 Block Body (multiple of 4 bytes)              / 8
//	|                      Block Total Length                       |
//	+---------------------------------------------------------------+
//
// Bodies of the blocks this package reads or writes:
//
//	SHB  0x0A0D0D0A  byte-order magic 1A2B3C4D, major 1, minor 0,
//	                 section length (int64, -1 = unknown), options
//	IDB  0x00000001  link type u16, reserved u16, snaplen u32, options
//	PB   0x00000002  interface id u16, drops u16, ts high, ts low,
//	                 captured len, original len, data, options (obsolete)
//	SPB  0x00000003  original len, data
//	ISB  0x00000005  interface id, ts high, ts low, options
//	EPB  0x00000006  interface id, ts high, ts low, captured len,
//	                 original len, data (padded to 4), options
//
// Options are (code u16, length u16, value padded to 4 bytes), ended by
// opt_endofopt (code 0, length 0).
const (
	blockSHB = 0x0A0D0D0A
	blockIDB = 0x00000001
	blockPB  = 0x00000002
	blockSPB = 0x00000003
	blockNRB = 0x00000004
	blockISB = 0x00000005
	blockEPB = 0x00000006

	byteOrderMagic = 0x1A2B3C4D

	optEndOfOpt = 0
	optComment  = 1

	optSHBHardware = 2
	optSHBOS       = 3
	optSHBUserAppl = 4

	optIfName        = 2
	optIfDescription = 3
	optIfTsresol     = 9
	optIfTsoffset    = 14

	optISBIfRecv   = 4
	optISBIfDrop   = 5
	optISBOSDrop   = 7
	optISBUsrDeliv = 8

	// Minimum total lengths: header + fixed body + trailer.
	minSHBLen = 28
	minIDBLen = 20
	minPBLen  = 32
	minSPBLen = 16
	minEPBLen = 32
	minISBLen = 24
)

// TimeConv converts the timestamps of a pcapng interface, in units of
// its if_tsresol (microseconds without one) from its if_tsoffset, to
// Unix nanoseconds: what the Reader gives as Packet.Timestamp. Readers
// of pcapng blocks of their own (the index's builder and verifier) use
// it to read a packet's time as the Reader does.
type TimeConv struct {
	conv     tsConv
	offsetNs uint64 // if_tsoffset in nanoseconds (two's complement)
}

// newTimeConv is an interface's conversion before its options: if_tsresol
// defaults to 6 (microseconds).
func newTimeConv() TimeConv { return TimeConv{conv: newTSConv(6)} }

// NanoTimeConv is the conversion of an interface whose times are in
// nanoseconds without an offset (if_tsresol 9), as the store writes.
func NanoTimeConv() TimeConv { return TimeConv{conv: newTSConv(9)} }

// Ns converts a packet block's timestamp (its two 32-bit halves as one
// value) to Unix nanoseconds.
func (c TimeConv) Ns(ts uint64) int64 { return int64(c.conv.ns(ts) + c.offsetNs) }

// option applies an interface description option of code, value v, to c;
// false if it is an if_tsresol or if_tsoffset of the wrong length.
func (c *TimeConv) option(code uint16, v []byte, order binary.ByteOrder) bool {
	switch code {
	case optIfTsresol:
		if len(v) != 1 {
			return false
		}
		c.conv = newTSConv(v[0])
	case optIfTsoffset:
		if len(v) != 8 {
			return false
		}
		c.offsetNs = order.Uint64(v) * 1e9
	}
	return true
}

// IDBTimeConv returns the conversion of an interface from the options
// of its Interface Description Block (the body after the link type,
// reserved field and snap length, up to the block's trailing length),
// in the section's byte order; false when an option overruns them or an
// if_tsresol or if_tsoffset has the wrong length (the Reader refuses
// such a block: ErrMalformed).
func IDBTimeConv(opts []byte, order binary.ByteOrder) (TimeConv, bool) {
	c := newTimeConv()
	for len(opts) >= 4 {
		code, olen := order.Uint16(opts), int(order.Uint16(opts[2:]))
		if code == optEndOfOpt {
			break
		}
		padded := (olen + 3) &^ 3
		if padded > len(opts)-4 || !c.option(code, opts[4:4+olen], order) {
			return c, false
		}
		opts = opts[4+padded:]
	}
	return c, true
}

// tsConv converts pcapng timestamps in units of an interface's if_tsresol to
// nanoseconds.
//
// Resolution 10^-9 is exact. Coarser resolutions (10^-e, e < 9) multiply
// and are exact. Finer resolutions (e > 9) divide and round toward zero, so
// sub-nanosecond precision is lost. Power-of-two resolutions 2^-p split the
// value into whole seconds and a fraction, convert the fraction with a
// 128-bit product (no math/big), and also round toward zero. Results beyond
// the int64 range (year 2262) wrap around.
type tsConv struct {
	kind  uint8
	k     uint64 // multiplier (convMul) or divisor (convDiv)
	shift uint   // convPow2: p
}

const (
	convMul  = iota // ns = ts * k
	convDiv         // ns = ts / k
	convZero        // resolution so fine that every uint64 value is < 1 ns
	convPow2        // resolution 2^-shift seconds
)

// newTSConv returns the converter for an if_tsresol option value: the low
// seven bits are the exponent; the high bit selects base 2 over base 10.
func newTSConv(tsresol uint8) tsConv {
	e := uint(tsresol & 0x7f)
	if tsresol&0x80 != 0 {
		return tsConv{kind: convPow2, shift: e}
	}
	switch {
	case e <= 9:
		return tsConv{kind: convMul, k: pow10(9 - e)}
	case e-9 <= 19: // 10^19 is the largest power of ten in a uint64
		return tsConv{kind: convDiv, k: pow10(e - 9)}
	}
	return tsConv{kind: convZero}
}

func pow10(n uint) uint64 {
	v := uint64(1)
	for ; n > 0; n-- {
		v *= 10
	}
	return v
}

// ns converts ts to nanoseconds (modulo 2^64).
func (c tsConv) ns(ts uint64) uint64 {
	switch c.kind {
	case convMul:
		return ts * c.k
	case convDiv:
		return ts / c.k
	case convZero:
		return 0
	}
	var sec, frac uint64
	if c.shift < 64 {
		sec, frac = ts>>c.shift, ts&(1<<c.shift-1)
	} else {
		frac = ts
	}
	// frac < 2^shift, so frac*1e9 >> shift < 1e9 fits easily.
	hi, lo := bits.Mul64(frac, 1e9)
	var fracNs uint64
	if c.shift < 64 {
		fracNs = hi<<(64-c.shift) | lo>>c.shift
	} else {
		fracNs = hi >> (c.shift - 64)
	}
	return sec*1e9 + fracNs
}

// readSHB reads a Section Header Block at the current offset and starts a
// new section. For the first block of the file a bad byte-order magic means
// the input is not pcapng (ErrUnknownFormat); later it is ErrMalformed.
// Its comments are kept (SectionComments); its other options are not
// interpreted.
func (r *Reader) readSHB(first bool) error {
	start := r.off
	if err := r.fill(12); err != nil {
		return r.readErr(start, "section header block", err)
	}
	switch bom := r.buf[r.r+8 : r.r+12]; {
	case bom[0] == 0x4D && bom[1] == 0x3C && bom[2] == 0x2B && bom[3] == 0x1A:
		r.be = false
	case bom[0] == 0x1A && bom[1] == 0x2B && bom[2] == 0x3C && bom[3] == 0x4D:
		r.be = true
	default:
		if first {
			return formatErr(start, ErrUnknownFormat, "bad pcapng byte-order magic % x", bom)
		}
		return formatErr(start, ErrMalformed, "bad pcapng byte-order magic % x", bom)
	}
	b, err := r.readBlock(start, blockSHB, r.u32(r.buf[r.r+4:]), minSHBLen)
	if err != nil {
		return err
	}
	if major, minor := r.u16(b[12:]), r.u16(b[14:]); major != 1 {
		return formatErr(start, ErrMalformed, "unsupported pcapng version %d.%d", major, minor)
	}
	r.comments = nil
	for opts := b[24 : len(b)-4]; len(opts) >= 4; {
		code, olen := r.u16(opts), int(r.u16(opts[2:]))
		if code == optEndOfOpt {
			break
		}
		padded := (olen + 3) &^ 3
		if padded > len(opts)-4 {
			return formatErr(start, ErrMalformed, "section header block option %d length %d overruns block", code, olen)
		}
		if code == optComment {
			r.comments = append(r.comments, trimNUL(opts[4:4+olen]))
		}
		opts = opts[4+padded:]
	}
	r.sectionBase = len(r.ifaces)
	r.sectionCount = 0
	return nil
}

// readNg reads blocks until it has a packet, io.EOF or an error.
func (r *Reader) readNg(p *Packet) error {
	for {
		start := r.off
		if err := r.fill(8); err != nil {
			if err == io.EOF {
				return io.EOF
			}
			return r.readErr(start, "block header", err)
		}
		typ := r.u32(r.buf[r.r:])
		if typ == blockSHB {
			if err := r.readSHB(false); err != nil {
				return err
			}
			continue
		}
		total := r.u32(r.buf[r.r+4:])
		switch typ {
		case blockIDB:
			if err := r.readIDB(start, total); err != nil {
				return err
			}
		case blockEPB, blockPB:
			return r.readEPB(p, start, typ, total)
		case blockSPB:
			return r.readSPB(p, start, total)
		case blockISB:
			if r.onStats == nil {
				if err := r.skipBlock(start, typ, total); err != nil {
					return err
				}
				continue
			}
			if err := r.readISB(start, total); err != nil {
				return err
			}
		default:
			if err := r.skipBlock(start, typ, total); err != nil {
				return err
			}
		}
	}
}

// checkLen validates a block total length against the rules every block
// obeys and the block type's minimum.
func checkLen(start int64, typ, total, minLen uint32) error {
	switch {
	case total%4 != 0:
		return formatErr(start, ErrMalformed, "%s total length %d not a multiple of 4", blockName(typ), total)
	case total < minLen:
		return formatErr(start, ErrMalformed, "%s total length %d below minimum %d", blockName(typ), total, minLen)
	}
	return nil
}

// readBlock buffers a whole block the Reader parses, checks its lengths and
// consumes it. The returned bytes (the whole block, header to trailer) stay
// valid until the next fill.
func (r *Reader) readBlock(start int64, typ, total, minLen uint32) ([]byte, error) {
	if err := checkLen(start, typ, total, minLen); err != nil {
		return nil, err
	}
	if int64(total) > r.maxBlock {
		return nil, formatErr(start, ErrTooLarge, "%s total length %d above limit %d", blockName(typ), total, r.maxBlock)
	}
	n := int(total)
	if err := r.fill(n); err != nil {
		return nil, r.readErr(start, blockName(typ), err)
	}
	b := r.buf[r.r : r.r+n : r.r+n]
	if trailer := r.u32(b[n-4:]); trailer != total {
		return nil, formatErr(start, ErrMalformed, "%s trailing length %d does not match total length %d", blockName(typ), trailer, total)
	}
	r.consume(n)
	return b, nil
}

// skipBlock streams past a block the Reader does not interpret, checking
// its lengths. It never buffers more than the Reader's buffer holds.
func (r *Reader) skipBlock(start int64, typ, total uint32) error {
	if err := checkLen(start, typ, total, 12); err != nil {
		return err
	}
	if err := r.discard(int64(total) - 4); err != nil {
		return r.readErr(start, blockName(typ), err)
	}
	if err := r.fill(4); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return r.readErr(start, blockName(typ), err)
	}
	if trailer := r.u32(r.buf[r.r:]); trailer != total {
		return formatErr(start, ErrMalformed, "%s trailing length %d does not match total length %d", blockName(typ), trailer, total)
	}
	r.consume(4)
	return nil
}

// readIDB reads an Interface Description Block and appends its interface.
// if_tsresol defaults to 6 (microseconds). String options have trailing NUL
// bytes removed. Unknown options are ignored; known ones with a wrong
// length, and options overrunning the block, are ErrMalformed.
func (r *Reader) readIDB(start int64, total uint32) error {
	b, err := r.readBlock(start, blockIDB, total, minIDBLen)
	if err != nil {
		return err
	}
	if r.maxIfaces > 0 && len(r.ifaces) >= r.maxIfaces {
		return formatErr(start, ErrTooLarge, "interface description block: more than %d interfaces", r.maxIfaces)
	}
	ifc := Interface{LinkType: r.u16(b[8:]), SnapLen: r.u32(b[12:])}
	info := newTimeConv()
	for opts := b[16 : len(b)-4]; len(opts) >= 4; {
		code, olen := r.u16(opts), int(r.u16(opts[2:]))
		if code == optEndOfOpt {
			break
		}
		padded := (olen + 3) &^ 3
		if padded > len(opts)-4 {
			return formatErr(start, ErrMalformed, "interface description block option %d length %d overruns block", code, olen)
		}
		v := opts[4 : 4+olen]
		switch code {
		case optIfName:
			ifc.Name = trimNUL(v)
		case optIfDescription:
			ifc.Description = trimNUL(v)
		case optComment:
			if ifc.Comment == "" {
				ifc.Comment = trimNUL(v)
			}
		case optIfTsresol, optIfTsoffset:
			if !info.option(code, v, r.order()) {
				return formatErr(start, ErrMalformed, "if_tsresol or if_tsoffset option (code %d) of %d bytes", code, olen)
			}
		}
		opts = opts[4+padded:]
	}
	if r.meta += len(ifc.Name) + len(ifc.Description) + len(ifc.Comment); r.maxMeta > 0 && r.meta > r.maxMeta {
		return formatErr(start, ErrTooLarge, "interface description block: names, descriptions and comments of more than %d bytes", r.maxMeta)
	}
	r.ifaces = append(r.ifaces, ifc)
	r.ifx = append(r.ifx, info)
	r.sectionCount++
	return nil
}

func trimNUL(b []byte) string {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return string(b)
}

// readEPB reads an Enhanced Packet Block or an obsolete Packet Block; their
// layouts differ only in the width of the interface id. Options are not
// interpreted.
func (r *Reader) readEPB(p *Packet, start int64, typ, total uint32) error {
	b, err := r.readBlock(start, typ, total, minEPBLen)
	if err != nil {
		return err
	}
	var id uint32
	if typ == blockEPB {
		id = r.u32(b[8:])
	} else {
		id = uint32(r.u16(b[8:]))
	}
	if id >= uint32(r.sectionCount) {
		return formatErr(start, ErrMalformed, "%s interface id %d not defined in section (%d interfaces)", blockName(typ), id, r.sectionCount)
	}
	ts := uint64(r.u32(b[12:]))<<32 | uint64(r.u32(b[16:]))
	caplen, origlen := r.u32(b[20:]), r.u32(b[24:])
	if room := total - minEPBLen; caplen > room {
		return formatErr(start, ErrMalformed, "%s captured length %d exceeds block room %d", blockName(typ), caplen, room)
	}
	if caplen > r.maxPacket {
		return formatErr(start, ErrTooLarge, "%s captured length %d above limit %d", blockName(typ), caplen, r.maxPacket)
	}
	g := r.sectionBase + int(id)
	info := &r.ifx[g]
	p.Timestamp = info.Ns(ts)
	p.Interface = g
	p.OrigLen = max(origlen, caplen)
	p.Data = b[28 : 28+caplen : 28+caplen]
	return nil
}

// readISB reads an Interface Statistics Block and hands it to onStats.
// Options other than the comment and the four counters are ignored;
// those with a wrong length, and options overrunning the block, are
// ErrMalformed.
func (r *Reader) readISB(start int64, total uint32) error {
	b, err := r.readBlock(start, blockISB, total, minISBLen)
	if err != nil {
		return err
	}
	id := r.u32(b[8:])
	if id >= uint32(r.sectionCount) {
		return formatErr(start, ErrMalformed, "interface statistics block interface id %d not defined in section (%d interfaces)", id, r.sectionCount)
	}
	g := r.sectionBase + int(id)
	info := &r.ifx[g]
	ts := uint64(r.u32(b[12:]))<<32 | uint64(r.u32(b[16:]))
	st := InterfaceStats{Timestamp: info.Ns(ts)}
	for opts := b[20 : len(b)-4]; len(opts) >= 4; {
		code, olen := r.u16(opts), int(r.u16(opts[2:]))
		if code == optEndOfOpt {
			break
		}
		padded := (olen + 3) &^ 3
		if padded > len(opts)-4 {
			return formatErr(start, ErrMalformed, "interface statistics block option %d length %d overruns block", code, olen)
		}
		v := opts[4 : 4+olen]
		var dst *uint64
		var have *bool
		switch code {
		case optComment:
			st.Comment = trimNUL(v)
		case optISBIfRecv:
			dst, have = &st.IfRecv, &st.HaveIfRecv
		case optISBIfDrop:
			dst, have = &st.IfDrop, &st.HaveIfDrop
		case optISBOSDrop:
			dst, have = &st.OsDrop, &st.HaveOsDrop
		case optISBUsrDeliv:
			dst, have = &st.UsrDeliv, &st.HaveUsrDeliv
		}
		if dst != nil {
			if olen != 8 {
				return formatErr(start, ErrMalformed, "interface statistics option %d length %d, want 8", code, olen)
			}
			*dst, *have = r.u64(v), true
		}
		opts = opts[4+padded:]
	}
	r.onStats(g, st)
	return nil
}

// readSPB reads a Simple Packet Block. It belongs to the section's first
// interface and carries no timestamp (Timestamp is 0). The captured length
// is min(original length, snaplen (if non-zero), block room).
func (r *Reader) readSPB(p *Packet, start int64, total uint32) error {
	b, err := r.readBlock(start, blockSPB, total, minSPBLen)
	if err != nil {
		return err
	}
	if r.sectionCount == 0 {
		return formatErr(start, ErrMalformed, "simple packet block in a section without interfaces")
	}
	origlen := r.u32(b[8:])
	caplen := min(origlen, total-minSPBLen)
	if snap := r.ifaces[r.sectionBase].SnapLen; snap != 0 {
		caplen = min(caplen, snap)
	}
	if caplen > r.maxPacket {
		return formatErr(start, ErrTooLarge, "simple packet block captured length %d above limit %d", caplen, r.maxPacket)
	}
	p.Timestamp = 0
	p.Interface = r.sectionBase
	p.OrigLen = origlen
	p.Data = b[12 : 12+caplen : 12+caplen]
	return nil
}

func blockName(typ uint32) string {
	switch typ {
	case blockSHB:
		return "section header block"
	case blockIDB:
		return "interface description block"
	case blockPB:
		return "packet block"
	case blockSPB:
		return "simple packet block"
	case blockISB:
		return "interface statistics block"
	case blockEPB:
		return "enhanced packet block"
	}
	return "block"
}
