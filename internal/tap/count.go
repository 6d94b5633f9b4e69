package tap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// errCounted ends Stream once StreamConfig.Count packets are written.
var errCounted = errors.New("count reached")

// pcapng block types counted as packets: enhanced, simple and the
// obsolete packet block.
const (
	blockSHB = 0x0a0d0d0a
	blockEPB = 6
	blockSPB = 3
	blockPB  = 2
)

// packetCounter passes a pcapng stream to w unchanged, block by block
// as it comes in pieces, and counts its packet blocks; once limit of
// them have passed whole it writes nothing more, and Write returns
// errCounted with the bytes up to that block's end. A stream that is
// not pcapng (a block shorter than 12 bytes or not a multiple of 4, an
// unknown byte-order magic) is an error.
type packetCounter struct {
	w      io.Writer
	limit  int64
	n      int64 // packet blocks passed whole
	be     bool  // the section's byte order
	head   [12]byte
	hn     int   // bytes of head read of the current block
	left   int64 // bytes of the current block after head still to pass
	packet bool  // the current block is a packet
}

func (c *packetCounter) Write(p []byte) (int, error) {
	for i := 0; i < len(p); {
		if c.hn < len(c.head) {
			k := copy(c.head[c.hn:], p[i:])
			c.hn, i = c.hn+k, i+k
			if c.hn < len(c.head) {
				break
			}
			if err := c.start(); err != nil {
				n, _ := c.w.Write(p[:i-k])
				return n, err
			}
		}
		k := int(min(int64(len(p)-i), c.left))
		i, c.left = i+k, c.left-int64(k)
		if c.left > 0 {
			break
		}
		c.hn = 0
		if c.packet {
			if c.n++; c.n >= c.limit {
				n, err := c.w.Write(p[:i])
				if err == nil {
					err = errCounted
				}
				return n, err
			}
		}
	}
	return c.w.Write(p)
}

// start reads the current block's head: its type, length and, for a
// section header, the byte order.
func (c *packetCounter) start() error {
	h := c.head[:]
	typ := binary.LittleEndian.Uint32(h) // a section header reads the same either way
	if typ == blockSHB {
		switch binary.LittleEndian.Uint32(h[8:]) {
		case 0x1a2b3c4d:
			c.be = false
		case 0x4d3c2b1a:
			c.be = true
		default:
			return fmt.Errorf("counting packets: section header of unknown byte order %x", h[8:])
		}
	}
	var bo binary.ByteOrder = binary.LittleEndian
	if c.be {
		bo = binary.BigEndian
	}
	typ = bo.Uint32(h)
	total := bo.Uint32(h[4:])
	if total < 12 || total%4 != 0 {
		return fmt.Errorf("counting packets: block of type %#x with length %d", typ, total)
	}
	c.left = int64(total) - 12
	c.packet = typ == blockEPB || typ == blockSPB || typ == blockPB
	return nil
}
