package tap

import (
	"fmt"

	"golang.org/x/net/bpf"

	"github.com/pcapsync/pcapsync/internal/capture"
)

// Filter runs a tcpdump expression on packets of any link type, in
// user space: it compiles the expression with libpcap once per link
// type (at first use) and runs the program in x/net/bpf's VM. The tap
// runs one per client on the collector; a reader of another source of
// batches (redisfeed.Copy) runs one too. Not safe for concurrent use.
type Filter struct {
	expr string
	vms  map[uint16]*bpf.VM // nil entry: does not compile for that link type
	errs map[uint16]error
}

// NewFilter checks expr against Ethernet, so that a syntax error is
// reported at once; "" accepts everything.
func NewFilter(expr string) (*Filter, error) {
	f := &Filter{expr: expr, vms: map[uint16]*bpf.VM{}, errs: map[uint16]error{}}
	if expr == "" {
		return f, nil
	}
	if _, err := f.vm(capture.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return f, nil
}

// vm returns the program for linkType, compiling it the first time.
func (f *Filter) vm(linkType uint16) (*bpf.VM, error) {
	if vm, ok := f.vms[linkType]; ok {
		return vm, f.errs[linkType]
	}
	vm, err := compileVM(linkType, f.expr)
	f.vms[linkType], f.errs[linkType] = vm, err
	return vm, err
}

func compileVM(linkType uint16, expr string) (*bpf.VM, error) {
	raw, err := capture.CompileFilter(linkType, 0, expr)
	if err != nil {
		return nil, err
	}
	ins, ok := bpf.Disassemble(raw)
	if !ok {
		return nil, fmt.Errorf("filter %q for link type %d: libpcap's program uses instructions the BPF VM lacks", expr, linkType)
	}
	vm, err := bpf.NewVM(ins)
	if err != nil {
		return nil, fmt.Errorf("filter %q for link type %d: %w", expr, linkType, err)
	}
	return vm, nil
}

// Match reports whether a packet of linkType passes. A filter that does
// not compile for linkType passes nothing; err says why, the first time
// only (for the caller to log once, or to give up).
func (f *Filter) Match(linkType uint16, data []byte) (ok bool, err error) {
	if f.expr == "" {
		return true, nil
	}
	_, seen := f.vms[linkType]
	vm, err := f.vm(linkType)
	if err != nil {
		if seen {
			err = nil
		}
		return false, err
	}
	n, err := vm.Run(data)
	return err == nil && n > 0, nil
}
