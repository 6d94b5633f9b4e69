package tap

import (
	"context"
	"fmt"

	"golang.org/x/net/bpf"

	"github.com/pcapsync/pcapsync/internal/capture"
)

// Filter runs a tcpdump expression on packets of any link type, in
// user space: it compiles the expression with libpcap once per link
// type (Compile, or Match at first use) and runs the program in
// x/net/bpf's VM. The expression is within capture.CheckFilter's
// limits. The tap runs one per client on the collector; a reader of
// another source of batches (redisfeed.Copy) and a query run one too.
// Not safe for concurrent use.
type Filter struct {
	expr string
	vms  map[uint16]*bpf.VM // nil entry: does not compile for that link type
	errs map[uint16]error
}

// NewFilter is NewFilterContext without an end to the compile's wait.
func NewFilter(expr string) (*Filter, error) {
	return NewFilterContext(context.Background(), expr)
}

// NewFilterContext checks expr against capture.CheckFilter's limits (an
// error matching capture.ErrFilterLimit) and compiles it for Ethernet,
// so that a syntax error is reported at once (capture.ErrBadFilter);
// ctx ends the compile's wait (capture.CompileFilterContext). ""
// accepts everything.
func NewFilterContext(ctx context.Context, expr string) (*Filter, error) {
	f := &Filter{expr: expr, vms: map[uint16]*bpf.VM{}, errs: map[uint16]error{}}
	if expr == "" {
		return f, nil
	}
	if err := capture.CheckFilter(expr); err != nil {
		return nil, err
	}
	if err := f.Compile(ctx, capture.LinkTypeEthernet); err != nil {
		return nil, err
	}
	return f, nil
}

// Compile compiles the filter for linkType unless it was (or is ""):
// the one place a Filter compiles. A filter that does not compile for linkType
// is an error, kept (Match then passes nothing); a compile that ctx
// ended is an error, not kept.
func (f *Filter) Compile(ctx context.Context, linkType uint16) error {
	if f.expr == "" {
		return nil
	}
	_, err := f.vm(ctx, linkType)
	return err
}

// vm returns the program for linkType, compiling it the first time.
func (f *Filter) vm(ctx context.Context, linkType uint16) (*bpf.VM, error) {
	if vm, ok := f.vms[linkType]; ok {
		return vm, f.errs[linkType]
	}
	vm, err := compileVM(ctx, linkType, f.expr)
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	f.vms[linkType], f.errs[linkType] = vm, err
	return vm, err
}

func compileVM(ctx context.Context, linkType uint16, expr string) (*bpf.VM, error) {
	raw, err := capture.CompileFilterContext(ctx, linkType, 0, expr)
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
	vm, err := f.vm(context.Background(), linkType)
	if err != nil {
		if seen {
			err = nil
		}
		return false, err
	}
	n, err := vm.Run(data)
	return err == nil && n > 0, nil
}
