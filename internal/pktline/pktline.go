package pktline

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"github.com/pcapsync/pcapsync/internal/pcapfile"
)

// TimeLayout is the time of a line: tcpdump -tttt's with nanoseconds,
// which pcapsync query's --since and --until read back.
const TimeLayout = "2006-01-02 15:04:05.000000000"

// Packet is what a line describes.
type Packet struct {
	Timestamp int64  // Unix ns
	Iface     string // "AGENT:IF" as the files name it; "" prints "-"
	LinkType  uint16 // LINKTYPE_ value
	OrigLen   uint32 // the length on the wire
	Data      []byte // the captured bytes
}

// AppendLine appends p's line, without its newline, to dst: its time
// in loc (nil: time.Local), its interface and what the package doc
// lists. It never fails: what cannot be decoded is named as such.
func AppendLine(dst []byte, p *Packet, loc *time.Location) []byte {
	if loc == nil {
		loc = time.Local
	}
	dst = time.Unix(0, p.Timestamp).In(loc).AppendFormat(dst, TimeLayout)
	dst = append(dst, ' ')
	if p.Iface == "" {
		dst = append(dst, '-')
	} else {
		dst = appendPrintable(dst, p.Iface)
	}
	dst = append(dst, ' ')
	hdr, wire := linkHeader(p.LinkType, p.Data)
	if hdr < 0 {
		return appendLinkOnly(dst, p.LinkType, p.OrigLen)
	}
	d := p.Data[hdr:]
	orig := int(p.OrigLen) - hdr
	if et, off, ok := lookThrough(wire, d); ok {
		return appendEtherType(dst, et, d[off:], orig-off)
	}
	return appendEtherType(dst, wire, d, orig)
}

// Frame kinds linkHeader returns beside the ethertypes.
const (
	etherIPv4   = 0x0800
	etherARP    = 0x0806
	etherIPv6   = 0x86dd
	etherVLAN   = 0x8100
	etherQinQ   = 0x88a8
	etherQinQ2  = 0x9100
	etherMPLS   = 0x8847
	etherMPLSM  = 0x8848
	etherPPPoES = 0x8864
	byVersion   = 0x10000 // IP by its version nibble
	notIP       = 0x10001 // an address family that is no IP
)

// linkHeader returns the length of the link header of a frame of link
// type lt and what follows it (an ethertype, byVersion, notIP); -1 for a
// link type not decoded or a frame shorter than its header.
func linkHeader(lt uint16, b []byte) (int, int) {
	switch lt {
	case 1: // Ethernet
		if len(b) < 14 {
			return -1, 0
		}
		return 14, int(binary.BigEndian.Uint16(b[12:]))
	case 113: // Linux cooked v1
		if len(b) < 16 {
			return -1, 0
		}
		return 16, int(binary.BigEndian.Uint16(b[14:]))
	case 276: // Linux cooked v2
		if len(b) < 20 {
			return -1, 0
		}
		return 20, int(binary.BigEndian.Uint16(b[0:]))
	case 101, 12, 14: // raw IP
		return 0, byVersion
	case 228, 229: // IPv4, IPv6: tcpdump goes by the version too
		return 0, byVersion
	case 105: // 802.11
		return wlanHeader(b, 0, false)
	case 127: // radiotap, then 802.11
		return radiotap(b)
	case 0, 108: // BSD null (the writer's byte order), loop (big-endian)
		if len(b) < 4 {
			return -1, 0
		}
		af := binary.BigEndian.Uint32(b)
		if lt == 0 && af&0xffff0000 != 0 {
			af = binary.LittleEndian.Uint32(b)
		}
		switch af {
		case 2:
			return 4, etherIPv4
		case 24, 28, 30:
			return 4, etherIPv6
		}
		return 4, notIP
	}
	return -1, 0
}

// radiotap returns the length of a radiotap header and the 802.11
// data frame's after it, and the ethertype its LLC/SNAP header carries
// (wlanHeader); the flags field says whether the 802.11 header is
// padded to 4 bytes.
func radiotap(b []byte) (int, int) {
	if len(b) < 8 {
		return -1, 0
	}
	rl := int(binary.LittleEndian.Uint16(b[2:]))
	present := binary.LittleEndian.Uint32(b[4:])
	off := 8
	for p := present; p&(1<<31) != 0 && off+4 <= rl && off+4 <= len(b); off += 4 {
		p = binary.LittleEndian.Uint32(b[off:])
	}
	pad := false
	if present&1 != 0 { // TSFT: 8 bytes, aligned to 8
		off = (off+7)&^7 + 8
	}
	if present&2 != 0 && off < rl && off < len(b) {
		pad = b[off]&0x20 != 0
	}
	if rl < 8 || rl > len(b) {
		return -1, 0
	}
	return wlanHeader(b, rl, pad)
}

// wlanHeader returns the end of the 802.11 data frame at b[off:] with
// its LLC/SNAP header, and the ethertype that header carries, as
// tcpdump decodes it: a data frame (not a null one, not protected) of
// 24 bytes of header, 30 with four addresses, 2 more with QoS, rounded
// up to 4 when pad, then AA AA 03 00 00 00 and the ethertype. Anything
// else is -1.
func wlanHeader(b []byte, off int, pad bool) (int, int) {
	if len(b) < off+2 {
		return -1, 0
	}
	fc0, fc1 := b[off], b[off+1]
	typ, subtype := fc0>>2&3, fc0>>4
	if typ != 2 || subtype&4 != 0 || fc1&0x40 != 0 {
		return -1, 0
	}
	hl := 24
	if fc1&3 == 3 {
		hl = 30
	}
	if subtype&8 != 0 {
		hl += 2
	}
	if pad {
		hl = (hl + 3) &^ 3
	}
	llc := off + hl
	if len(b) < llc+8 || b[llc] != 0xaa || b[llc+1] != 0xaa || b[llc+2] != 3 || b[llc+3]|b[llc+4]|b[llc+5] != 0 {
		return -1, 0
	}
	return llc + 8, int(binary.BigEndian.Uint16(b[llc+6:]))
}

// lookThrough skips VLAN, QinQ, MPLS and PPPoE session headers after an
// Ethernet or cooked header: the ethertype under them and its offset.
func lookThrough(et int, b []byte) (int, int, bool) {
	off := 0
	for {
		switch et {
		case etherVLAN, etherQinQ, etherQinQ2:
			if len(b) < off+4 {
				return 0, 0, false
			}
			et = int(binary.BigEndian.Uint16(b[off+2:]))
			off += 4
		case etherMPLS, etherMPLSM:
			for {
				if len(b) < off+4 {
					return 0, 0, false
				}
				bottom := b[off+2]&1 != 0
				off += 4
				if bottom {
					return byVersion, off, true
				}
			}
		case etherPPPoES:
			if len(b) < off+8 {
				return 0, 0, false
			}
			switch binary.BigEndian.Uint16(b[off+6:]) {
			case 0x0021:
				et = etherIPv4
			case 0x0057:
				et = etherIPv6
			default:
				return 0, 0, false
			}
			off += 8
		default:
			return et, off, off > 0
		}
	}
}

// appendEtherType appends what follows a link header of kind et: b the
// captured bytes, orig their length on the wire.
func appendEtherType(dst []byte, et int, b []byte, orig int) []byte {
	if et == byVersion {
		if len(b) == 0 {
			return append(dst, "IP [|ip]"...)
		}
		switch b[0] >> 4 {
		case 4:
			et = etherIPv4
		case 6:
			et = etherIPv6
		default:
			return fmt.Appendf(dst, "IP%d, length %d", b[0]>>4, orig)
		}
	}
	switch et {
	case etherIPv4:
		return appendIPv4(dst, b, orig)
	case etherIPv6:
		return appendIPv6(dst, b, orig)
	case etherARP:
		return appendARP(dst, b, orig)
	case notIP:
		return fmt.Appendf(dst, "not IP, length %d", orig)
	}
	if et <= 1500 {
		return fmt.Appendf(dst, "802.3, length %d", orig)
	}
	return fmt.Appendf(dst, "ethertype 0x%04x, length %d", et, orig)
}

// linkNames are the link types printed by name only.
var linkNames = map[uint16]string{105: "802.11", 127: "802.11 radiotap", 119: "802.11 prism", 192: "PPI"}

func appendLinkOnly(dst []byte, lt uint16, orig uint32) []byte {
	if n, ok := linkNames[lt]; ok {
		return fmt.Appendf(dst, "%s, length %d", n, orig)
	}
	return fmt.Appendf(dst, "link type %d, length %d", lt, orig)
}

// appendIPv4 follows tcpdump's ip_print: the addresses once the header
// is captured and its lengths hold, the next header's line from the
// first fragment, ip-proto-N from a later one.
func appendIPv4(dst []byte, b []byte, orig int) []byte {
	dst = append(dst, "IP "...)
	switch {
	case len(b) < 20:
		return append(dst, "[|ip]"...)
	case b[0]>>4 != 4:
		return fmt.Appendf(dst, "version %d", b[0]>>4)
	case orig < 20:
		return fmt.Appendf(dst, "truncated-ip %d", orig)
	}
	hlen := int(b[0]&0xf) * 4
	if hlen < 20 {
		return fmt.Appendf(dst, "bad-hlen %d", hlen)
	}
	total := int(binary.BigEndian.Uint16(b[2:]))
	if total < hlen {
		return fmt.Appendf(dst, "bad-len %d", total)
	}
	src, _ := netip.AddrFromSlice(b[12:16])
	dstIP, _ := netip.AddrFromSlice(b[16:20])
	proto := int(b[9])
	frag := binary.BigEndian.Uint16(b[6:]) & 0x1fff
	if frag != 0 {
		return fmt.Appendf(append(appendPair(dst, src, dstIP, -1, -1), ':'), " ip-proto-%d", proto)
	}
	if len(b) < hlen { // options cut: tcpdump stops before the ports
		if ports(proto) {
			return append(dst, "[|ip]"...)
		}
		return append(appendPair(dst, src, dstIP, -1, -1), ": [|ip]"...)
	}
	return appendL4(dst, proto, src, dstIP, b[hlen:min(total, len(b))], total-hlen, false)
}

// appendIPv6 follows tcpdump's ip6_print: the extension headers it
// walks (hop-by-hop, first only; routing of types 0, 2 and 4 with an
// even length; destination options; a first fragment) are skipped to
// the header they lead to, checked as tcpdump checks them; at one it
// finds invalid, cut or a later fragment, the line ends after the
// addresses.
func appendIPv6(dst []byte, b []byte, orig int) []byte {
	dst = append(dst, "IP6 "...)
	if len(b) < 40 {
		return append(dst, "[|ip6]"...)
	}
	if b[0]>>4 != 6 {
		return fmt.Appendf(dst, "bad-version %d", b[0]>>4)
	}
	src, _ := netip.AddrFromSlice(b[8:24])
	dstIP, _ := netip.AddrFromSlice(b[24:40])
	payload := int(binary.BigEndian.Uint16(b[4:]))
	nh, off, why := extHeaders(b, payload)
	if why != "" {
		return append(append(appendPair(dst, src, dstIP, -1, -1), ": "...), why...)
	}
	end := min(len(b), 40+payload)
	return appendL4(dst, nh, src, dstIP, b[min(off, end):end], 40+payload-off, off > 40)
}

// extHeaders walks the IPv6 extension headers of packet b: the header
// they lead to and its offset, or why the walk stopped.
func extHeaders(b []byte, payload int) (nh, off int, why string) {
	end := min(len(b), 40+payload)
	nh, off = int(b[6]), 40
	for first := true; ; first = false {
		switch nh {
		case 0, 43, 60: // hop-by-hop, routing, destination options
			if end < off+2 {
				return 0, 0, "[|ip6]"
			}
			hl := (int(b[off+1]) + 1) * 8
			switch {
			case end < off+hl:
				return 0, 0, "[|ip6]"
			case nh == 0 && (!first || payload == 0), nh != 43 && !validOptions(b[off+2:off+hl]):
				return 0, 0, "[invalid]"
			case nh == 43 && (b[off+2] != 0 && b[off+2] != 2 && b[off+2] != 4 || b[off+1]%2 == 1):
				return 0, 0, "[invalid]"
			}
			nh, off = int(b[off]), off+hl
		case 44: // fragment
			if end <= off+8 {
				return 0, 0, "[|frag]"
			}
			if binary.BigEndian.Uint16(b[off+2:])&0xfff8 != 0 {
				return 0, 0, "frag"
			}
			nh, off = int(b[off]), off+8
		default:
			return nh, off, ""
		}
	}
}

// validOptions reports whether the options of a hop-by-hop or
// destination options header hold together as tcpdump requires: each
// within the header, a jumbo payload of 4 bytes, a router alert of 2, a
// home address of 16 or more.
func validOptions(opts []byte) bool {
	for i := 0; i < len(opts); {
		if opts[i] == 0 { // Pad1
			i++
			continue
		}
		if i+2 > len(opts) || i+2+int(opts[i+1]) > len(opts) {
			return false
		}
		switch l := int(opts[i+1]); opts[i] {
		case 0xc2:
			if l != 4 {
				return false
			}
		case 0x05:
			if l != 2 {
				return false
			}
		case 0xc9:
			if l < 16 {
				return false
			}
		}
		i += 2 + int(opts[i+1])
	}
	return true
}

// ports reports whether tcpdump prints the addresses of proto with its
// ports, in its own printer: TCP, UDP, DCCP and SCTP.
func ports(proto int) bool { return proto == 6 || proto == 17 || proto == 33 || proto == 132 }

// appendL4 appends the addresses and what follows of the next header
// proto: b its captured bytes (cut at the IP length), length its length
// by the IP header; ext: IPv6 extension headers came before (tcpdump
// has then printed the addresses already).
func appendL4(dst []byte, proto int, src, dstIP netip.Addr, b []byte, length int, ext bool) []byte {
	switch proto {
	case 132: // SCTP: nothing before its common header is captured, as tcpdump
		if len(b) < 12 && !ext {
			return append(dst, "[|sctp]"...)
		}
		if len(b) < 12 {
			return append(appendPair(dst, src, dstIP, -1, -1), ": [|sctp]"...)
		}
		fallthrough
	case 6, 17: // TCP, UDP: the ports if captured
		if len(b) < 4 {
			return append(appendPair(dst, src, dstIP, -1, -1), ": [|"+protoName(proto)+"]"...)
		}
		sp, dp := int(binary.BigEndian.Uint16(b)), int(binary.BigEndian.Uint16(b[2:]))
		dst = append(appendPair(dst, src, dstIP, sp, dp), ": "...)
		switch proto {
		case 6:
			return appendTCP(dst, b, length)
		case 17:
			return appendUDP(dst, b, length)
		}
		return append(dst, "sctp"...)
	}
	dst = append(appendPair(dst, src, dstIP, -1, -1), ": "...)
	switch proto {
	case 1, 58:
		name := "ICMP"
		if proto == 58 {
			name = "ICMP6"
		}
		if len(b) < 2 {
			return fmt.Appendf(dst, "%s [|icmp], length %d", name, length)
		}
		return fmt.Appendf(dst, "%s type %d code %d, length %d", name, b[0], b[1], length)
	}
	return fmt.Appendf(dst, "ip-proto-%d %d", proto, length)
}

func protoName(proto int) string {
	switch proto {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	}
	return "sctp"
}

// tcpFlags are TCP's flags as tcpdump prints them, in its order.
var tcpFlags = [...]struct {
	bit byte
	c   byte
}{{0x01, 'F'}, {0x02, 'S'}, {0x04, 'R'}, {0x08, 'P'}, {0x10, '.'}, {0x20, 'U'}, {0x40, 'E'}, {0x80, 'W'}}

// appendTCP appends the flags and the payload length.
func appendTCP(dst []byte, b []byte, length int) []byte {
	if len(b) < 14 {
		return append(dst, "[|tcp]"...)
	}
	hlen := int(b[12]>>4) * 4
	if hlen < 20 {
		return fmt.Appendf(dst, "tcp %d [bad hdr length %d - too short, < 20]", length, hlen)
	}
	if hlen > length {
		return fmt.Appendf(dst, "[bad hdr length %d - too long, > %d]", hlen, length)
	}
	dst = append(dst, "Flags ["...)
	n := len(dst)
	for _, f := range tcpFlags {
		if b[13]&f.bit != 0 {
			dst = append(dst, f.c)
		}
	}
	if len(dst) == n {
		dst = append(dst, "none"...)
	}
	return fmt.Appendf(dst, "], length %d", length-hlen)
}

// appendUDP appends the payload length: the UDP length's, if within
// the IP payload.
func appendUDP(dst []byte, b []byte, length int) []byte {
	if len(b) < 8 {
		return append(dst, "[|udp]"...)
	}
	ulen := int(binary.BigEndian.Uint16(b[4:]))
	if ulen < 8 {
		return fmt.Appendf(dst, "UDP, bad length %d", ulen)
	}
	return fmt.Appendf(dst, "UDP, length %d", min(ulen, length)-8)
}

// appendARP appends an Ethernet/IPv4 ARP request or reply as tcpdump
// -n words it; other ARP as "ARP".
func appendARP(dst []byte, b []byte, orig int) []byte {
	dst = append(dst, "ARP, "...)
	if len(b) >= 28 && binary.BigEndian.Uint16(b) == 1 && binary.BigEndian.Uint16(b[2:]) == etherIPv4 && b[4] == 6 && b[5] == 4 {
		sha := b[8:14]
		spa, _ := netip.AddrFromSlice(b[14:18])
		tpa, _ := netip.AddrFromSlice(b[24:28])
		switch binary.BigEndian.Uint16(b[6:]) {
		case 1:
			dst = fmt.Appendf(dst, "Request who-has %s", tpa)
			if tha := b[18:24]; string(tha) != "\x00\x00\x00\x00\x00\x00" {
				dst = fmt.Appendf(dst, " (%02x:%02x:%02x:%02x:%02x:%02x)", tha[0], tha[1], tha[2], tha[3], tha[4], tha[5])
			}
			dst = fmt.Appendf(dst, " tell %s, ", spa)
		case 2:
			dst = fmt.Appendf(dst, "Reply %s is-at %02x:%02x:%02x:%02x:%02x:%02x, ", spa, sha[0], sha[1], sha[2], sha[3], sha[4], sha[5])
		}
	}
	return fmt.Appendf(dst, "length %d", orig)
}

// appendPair appends "SRC > DST", each with its port after a '.' when
// the port is not -1, as tcpdump -n writes them.
func appendPair(dst []byte, src, d netip.Addr, sp, dp int) []byte {
	dst = src.AppendTo(dst)
	if sp >= 0 {
		dst = strconv.AppendInt(append(dst, '.'), int64(sp), 10)
	}
	dst = d.AppendTo(append(dst, " > "...))
	if dp >= 0 {
		dst = strconv.AppendInt(append(dst, '.'), int64(dp), 10)
	}
	return dst
}

// appendPrintable appends s with its control bytes and non-ASCII as
// '?': an interface name comes from a file.
func appendPrintable(dst []byte, s string) []byte {
	for i := range len(s) {
		c := s[i]
		if c < 0x21 || c > 0x7e {
			c = '?'
		}
		dst = append(dst, c)
	}
	return dst
}

// Print reads a pcap or pcapng stream from r and writes one line per
// packet to w (AppendLine, times in loc; nil: time.Local) until r
// ends, and returns the packets printed. An empty r prints nothing and
// is no error; a stream that is not pcap or pcapng, or is damaged, is an
// error wrapping ErrStream. w is flushed before every read of r, so
// that the lines of a live stream come out as their packets arrive.
func Print(w io.Writer, r io.Reader, loc *time.Location) (int64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	fr := &flushReader{r: r, w: bw}
	pr, err := pcapfile.NewReader(fr, nil)
	if err != nil {
		if fr.n == 0 && errors.Is(err, pcapfile.ErrTruncated) {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: %w", ErrStream, err)
	}
	var n int64
	var p pcapfile.Packet
	line := make([]byte, 0, 256)
	for {
		if err = pr.ReadInto(&p); err != nil {
			break
		}
		ifc := pr.Interfaces()[p.Interface]
		line = AppendLine(line[:0], &Packet{Timestamp: p.Timestamp, Iface: ifc.Name, LinkType: ifc.LinkType, OrigLen: p.OrigLen, Data: p.Data}, loc)
		if _, err = bw.Write(append(line, '\n')); err != nil {
			return n, err
		}
		n++
	}
	switch {
	case errors.Is(err, io.EOF):
		err = nil
	case fr.werr != nil:
		return n, fr.werr
	case err != nil:
		err = fmt.Errorf("%w: %w", ErrStream, err)
	}
	if ferr := bw.Flush(); err == nil {
		err = ferr
	}
	return n, err
}

// flushReader flushes w before each read of r, and counts the bytes
// read.
type flushReader struct {
	r    io.Reader
	w    *bufio.Writer
	n    int64
	werr error // of a flush
}

func (f *flushReader) Read(b []byte) (int, error) {
	if err := f.w.Flush(); err != nil {
		f.werr = err
		return 0, err
	}
	n, err := f.r.Read(b)
	f.n += int64(n)
	return n, err
}
