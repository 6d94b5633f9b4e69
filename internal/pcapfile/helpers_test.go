package pcapfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
)

// byteOrder reads and appends in one byte order.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// ngBuilder assembles pcapng bytes by hand, in either byte order, including
// deliberately broken blocks.
type ngBuilder struct {
	order byteOrder
	b     []byte
}

type opt struct {
	code uint16
	val  []byte
}

// section appends a Section Header Block and switches to order.
func (nb *ngBuilder) section(order byteOrder, opts ...opt) *ngBuilder {
	nb.order = order
	body := order.AppendUint32(nil, byteOrderMagic)
	body = order.AppendUint16(body, 1)
	body = order.AppendUint16(body, 0)
	body = order.AppendUint64(body, ^uint64(0))
	return nb.block(blockSHB, append(body, nb.opts(opts)...))
}

// block appends a block of type typ with body padded to 4 bytes.
func (nb *ngBuilder) block(typ uint32, body []byte) *ngBuilder {
	body = append(body, make([]byte, -len(body)&3)...)
	total := uint32(12 + len(body))
	nb.b = nb.order.AppendUint32(nb.b, typ)
	nb.b = nb.order.AppendUint32(nb.b, total)
	nb.b = append(nb.b, body...)
	nb.b = nb.order.AppendUint32(nb.b, total)
	return nb
}

func (nb *ngBuilder) opts(opts []opt) []byte {
	if len(opts) == 0 {
		return nil
	}
	var b []byte
	for _, o := range opts {
		b = nb.order.AppendUint16(b, o.code)
		b = nb.order.AppendUint16(b, uint16(len(o.val)))
		b = append(b, o.val...)
		b = append(b, make([]byte, -len(o.val)&3)...)
	}
	return append(b, 0, 0, 0, 0)
}

func (nb *ngBuilder) idb(link uint16, snap uint32, opts ...opt) *ngBuilder {
	body := nb.order.AppendUint16(nil, link)
	body = nb.order.AppendUint16(body, 0)
	body = nb.order.AppendUint32(body, snap)
	return nb.block(blockIDB, append(body, nb.opts(opts)...))
}

func (nb *ngBuilder) epb(ifid uint32, ts uint64, orig uint32, data []byte, opts ...opt) *ngBuilder {
	body := nb.order.AppendUint32(nil, ifid)
	body = nb.order.AppendUint32(body, uint32(ts>>32))
	body = nb.order.AppendUint32(body, uint32(ts))
	body = nb.order.AppendUint32(body, uint32(len(data)))
	body = nb.order.AppendUint32(body, orig)
	body = append(body, data...)
	body = append(body, make([]byte, -len(data)&3)...)
	return nb.block(blockEPB, append(body, nb.opts(opts)...))
}

func (nb *ngBuilder) pb(ifid uint16, ts uint64, orig uint32, data []byte) *ngBuilder {
	body := nb.order.AppendUint16(nil, ifid)
	body = nb.order.AppendUint16(body, 0) // drops
	body = nb.order.AppendUint32(body, uint32(ts>>32))
	body = nb.order.AppendUint32(body, uint32(ts))
	body = nb.order.AppendUint32(body, uint32(len(data)))
	body = nb.order.AppendUint32(body, orig)
	return nb.block(blockPB, append(body, data...))
}

func (nb *ngBuilder) spb(orig uint32, data []byte) *ngBuilder {
	return nb.block(blockSPB, append(nb.order.AppendUint32(nil, orig), data...))
}

// u32 and u64 encode option values in the builder's byte order.
func (nb *ngBuilder) u64(v uint64) []byte { return nb.order.AppendUint64(nil, v) }

// off is the offset the next block will start at.
func (nb *ngBuilder) off() int64 { return int64(len(nb.b)) }

func (nb *ngBuilder) raw(b ...byte) *ngBuilder { nb.b = append(nb.b, b...); return nb }

// pcapBuilder assembles classic pcap bytes by hand.
type pcapBuilder struct {
	order byteOrder
	b     []byte
}

func newPcap(order byteOrder, magic uint32, major uint16, snap, link uint32) *pcapBuilder {
	pb := &pcapBuilder{order: order}
	pb.b = order.AppendUint32(pb.b, magic)
	pb.b = order.AppendUint16(pb.b, major)
	pb.b = order.AppendUint16(pb.b, 4)
	pb.b = order.AppendUint32(pb.b, 0)
	pb.b = order.AppendUint32(pb.b, 0)
	pb.b = order.AppendUint32(pb.b, snap)
	pb.b = order.AppendUint32(pb.b, link)
	return pb
}

// rec appends a record whose header claims incl and orig but which carries
// data as given (so incl != len(data) builds a truncated record).
func (pb *pcapBuilder) rec(sec, frac, incl, orig uint32, data []byte) *pcapBuilder {
	pb.b = pb.order.AppendUint32(pb.b, sec)
	pb.b = pb.order.AppendUint32(pb.b, frac)
	pb.b = pb.order.AppendUint32(pb.b, incl)
	pb.b = pb.order.AppendUint32(pb.b, orig)
	pb.b = append(pb.b, data...)
	return pb
}

func (pb *pcapBuilder) off() int64 { return int64(len(pb.b)) }

// readAll reads every packet (copied) from b. It fails the test if
// NewReader fails; a ReadInto error other than io.EOF is returned.
func readAll(t testing.TB, b []byte, cfg *ReaderConfig) (*Reader, []Packet, error) {
	t.Helper()
	r, err := NewReader(bytes.NewReader(b), cfg)
	if err != nil {
		t.Fatalf("NewReader: %v", err)
	}
	var pkts []Packet
	for {
		p, err := r.ReadPacket()
		if errors.Is(err, io.EOF) {
			return r, pkts, nil
		}
		if err != nil {
			return r, pkts, err
		}
		pkts = append(pkts, p)
	}
}

// payload returns n deterministic bytes.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

// repeatReader yields head once and then body forever, so a Reader can be
// driven through millions of packets without reaching io.EOF.
type repeatReader struct {
	head, body []byte
	pos        int
	inBody     bool
}

func (rr *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		src := rr.head
		if rr.inBody {
			src = rr.body
		}
		c := copy(p[n:], src[rr.pos:])
		n += c
		rr.pos += c
		if rr.pos == len(src) {
			rr.pos, rr.inBody = 0, true
		}
	}
	return n, nil
}

// checkFormatErr asserts that err is a *FormatError with sentinel want at
// offset off.
func checkFormatErr(t *testing.T, err, want error, off int64) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T) is not a *FormatError", err, err)
	}
	if !errors.Is(err, want) {
		t.Errorf("error %q: errors.Is(%v) false", err, want)
	}
	if fe.Offset != off {
		t.Errorf("error %q: offset %d, want %d", err, fe.Offset, off)
	}
}

// ethWriter is an NgWriter into dst with one Ethernet interface, name.
func ethWriter(t *testing.T, dst io.Writer, name string, snap uint32) *NgWriter {
	t.Helper()
	w, err := NewNgWriter(dst, SectionInfo{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AddInterface(Interface{Name: name, LinkType: 1, SnapLen: snap}); err != nil {
		t.Fatal(err)
	}
	return w
}
