//go:build cgo

package capture

// This is the only file that needs cgo and libpcap: filter compilation is
// quarantined here. Without cgo, filter_nocgo.go takes its place.

import (
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcap"
	"golang.org/x/net/bpf"
)

// compile compiles expr with libpcap for the given DLT_* value.
func compile(dlt uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	ins, err := pcap.CompileBPFFilter(layers.LinkType(dlt), snapLen, expr)
	if err != nil {
		return nil, &filterError{expr: expr, msg: err.Error()}
	}
	out := make([]bpf.RawInstruction, len(ins))
	for i, in := range ins {
		out[i] = bpf.RawInstruction{Op: in.Code, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}
