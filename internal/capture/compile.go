package capture

import (
	"fmt"
	"strings"

	"golang.org/x/net/bpf"
)

// dltRaw is DLT_RAW on every platform but OpenBSD. libpcap's compiler takes
// DLT_* values, which differ from the LINKTYPE_* values in pcap files for
// raw IP: pcap_open_dead(101) fails with "unknown data link type 101".
const dltRaw = 12

// CompileFilter compiles a filter expression in tcpdump (pcap-filter(7))
// syntax into a classic BPF program for frames of the given LINKTYPE_*
// (as returned by Handle.LinkType), accepting at most snapLen bytes of each
// packet. snapLen 0 means DefaultSnapLen. The empty expression yields a
// program that accepts everything. Use it to validate a filter before
// calling Open; errors from libpcap match ErrBadFilter and carry its
// message; so does an expression holding a NUL byte. It needs cgo;
// without it only "" compiles.
func CompileFilter(linkType uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	if snapLen == 0 {
		snapLen = DefaultSnapLen
	}
	if snapLen < 0 || snapLen > MaxSnapLen {
		return nil, invalidf("capture: snaplen %d out of range 1..%d", snapLen, MaxSnapLen)
	}
	if i := strings.IndexByte(expr, 0); i >= 0 {
		// libpcap reads a C string: it would compile what comes before.
		return nil, &filterError{expr: expr, msg: fmt.Sprintf("a NUL byte at offset %d", i)}
	}
	dlt := linkType
	if linkType == LinkTypeRaw {
		dlt = dltRaw
	}
	return compile(dlt, snapLen, expr)
}
