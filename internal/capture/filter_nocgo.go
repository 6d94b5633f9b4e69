//go:build !cgo

package capture

import (
	"golang.org/x/net/bpf"
)

// compile stands in for libpcap when the package is built without cgo: it
// only handles the empty expression, which needs no compiler.
func compile(_ uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	if expr != "" {
		return nil, &filterError{expr: expr, msg: "filter expressions need libpcap, and this program was built without cgo"}
	}
	return []bpf.RawInstruction{{Op: 0x06, K: uint32(snapLen)}}, nil // ret #snaplen
}

// compileFile stands in for libpcap as compile does.
func compileFile(_ uint16, _ bool, expr string) ([]bpf.RawInstruction, error) {
	return compile(0, MaxSnapLen, expr)
}
