package filter

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"

	"github.com/pcapsync/pcapsync/internal/capture"
)

// CheckRemote is capture.CheckRemoteFilter: for a filter a server's
// client sent (a tap client's), it refuses names libpcap would look up.
func CheckRemote(expr string) error { return capture.CheckRemoteFilter(expr) }

// Filter runs a tcpdump expression on packets of any link type, in
// user space, with the semantics of tcpdump -r on a file of the
// packet's link type: it compiles the expression with libpcap once
// per link type as for such a file (capture.CompileFileFilterContext:
// Compile, or Match at first use) and runs the program as libpcap's
// interpreter does, BPF's len being the packet's original length. For
// DLT_NULL, whose header holds the address family in the byte order of
// the host that captured it, each packet is run with the program
// tcpdump -r uses for a file of that byte order (big-endian when the
// header's first two bytes are zero and its last two are not).
// The expression is within capture.CheckFilter's limits. The tap runs
// one per client on the collector; a reader of another source of
// batches (redisfeed.Copy) and a query run one too. Not safe for
// concurrent use.
type Filter struct {
	expr  string
	progs map[progKey]program // nil entry: does not compile for that key
	errs  map[progKey]error
}

// progKey names a compiled program: a link type, and for DLT_NULL the
// byte order of the header's address family.
type progKey struct {
	linkType  uint16
	bigEndian bool
}

// linkTypeNull is LINKTYPE_NULL (DLT_NULL): BSD loopback.
const linkTypeNull = 0

// checkLinkTypes are the link types NewContext tries a filter
// on, Ethernet first: a filter that compiles for one of them is
// accepted. Linux cooked v1 and v2, raw IP, BSD null and loop, 802.11
// and radiotap.
var checkLinkTypes = []uint16{capture.LinkTypeEthernet, 113, 276, capture.LinkTypeRaw, linkTypeNull, 108, 105, 127}

// New is NewContext without an end to the compile's wait.
func New(expr string) (*Filter, error) {
	return NewContext(context.Background(), expr)
}

// NewContext checks expr against capture.CheckFilter's limits (an
// error matching capture.ErrFilterLimit) and compiles it for Ethernet,
// then, until one compiles, for the other link types pcapsync meets
// (Linux cooked v1 and v2, raw IP, BSD null and loop, 802.11,
// radiotap), so that a filter libpcap refuses for all of them is
// reported at once with libpcap's message for Ethernet
// (capture.ErrBadFilter) while "inbound" (Linux cooked only) is
// accepted. ctx ends the compile's wait (capture.CompileFilterContext).
// "" accepts everything.
func NewContext(ctx context.Context, expr string) (*Filter, error) {
	return NewFor(ctx, expr, checkLinkTypes)
}

// NewFor is NewContext trying the link types lts, in
// order, instead of those pcapsync meets: a filter refused for all of
// them is refused with libpcap's message for the first (a query
// refuses with the message of a link type of its files, as tcpdump -r
// on one of them would). With no link types the filter is refused as
// NewContext refuses it.
func NewFor(ctx context.Context, expr string, lts []uint16) (*Filter, error) {
	f := &Filter{expr: expr, progs: map[progKey]program{}, errs: map[progKey]error{}}
	if expr == "" {
		return f, nil
	}
	if err := capture.CheckFilter(expr); err != nil {
		return nil, err
	}
	if len(lts) == 0 {
		lts = checkLinkTypes
	}
	var first error
	for _, lt := range lts {
		err := f.Compile(ctx, lt)
		if err == nil {
			return f, nil
		}
		if ctx.Err() != nil || !errors.Is(err, capture.ErrBadFilter) {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// Clone returns a Filter of the same expression holding the programs f
// compiled so far, for another goroutine: the two then compile and
// match apart (the programs are shared: running one changes nothing).
func (f *Filter) Clone() *Filter {
	return &Filter{expr: f.expr, progs: maps.Clone(f.progs), errs: maps.Clone(f.errs)}
}

// Compile compiles the filter for linkType unless it was (or is ""):
// the one place a Filter compiles (for DLT_NULL twice, for either byte
// order). A filter that does not compile for linkType is an error,
// kept (Match then passes nothing); a compile that ctx ended is an
// error, not kept.
func (f *Filter) Compile(ctx context.Context, linkType uint16) error {
	if f.expr == "" {
		return nil
	}
	_, err := f.prog(ctx, progKey{linkType: linkType})
	if err == nil && linkType == linkTypeNull {
		_, err = f.prog(ctx, progKey{linkType: linkType, bigEndian: true})
	}
	return err
}

// prog returns the program for key, compiling it the first time.
func (f *Filter) prog(ctx context.Context, key progKey) (program, error) {
	if p, ok := f.progs[key]; ok {
		return p, f.errs[key]
	}
	p, err := compileProgram(ctx, key, f.expr)
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	f.progs[key], f.errs[key] = p, err
	return p, err
}

func compileProgram(ctx context.Context, key progKey, expr string) (program, error) {
	swapped := key.bigEndian != (binary.NativeEndian.Uint16([]byte{0, 1}) == 1)
	raw, err := capture.CompileFileFilterContext(ctx, key.linkType, swapped, expr)
	if err != nil {
		return nil, err
	}
	p, err := newProgram(raw)
	if err != nil {
		return nil, fmt.Errorf("filter %q for link type %d: %w", expr, key.linkType, err)
	}
	return p, nil
}

// Match reports whether a packet of linkType passes: data its captured
// bytes, origLen its length on the wire (BPF's len; at least
// len(data)). A filter that does not compile for linkType passes
// nothing; err says why, the first time only (for the caller to log
// once, or to give up). It allocates nothing once the program for
// linkType is compiled.
func (f *Filter) Match(linkType uint16, data []byte, origLen uint32) (ok bool, err error) {
	if f.expr == "" {
		return true, nil
	}
	key := progKey{linkType: linkType}
	if linkType == linkTypeNull && len(data) >= 4 {
		key.bigEndian = data[0]|data[1] == 0 && data[2]|data[3] != 0
	}
	p, seen := f.progs[key]
	if !seen || p == nil {
		if p, err = f.prog(context.Background(), key); err != nil {
			if seen {
				err = nil
			}
			return false, err
		}
	}
	origLen = max(origLen, uint32(len(data)))
	return p.run(data, origLen) > 0, nil
}
