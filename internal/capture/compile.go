package capture

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"

	"golang.org/x/net/bpf"
)

// dltRaw is DLT_RAW on every platform but OpenBSD. libpcap's compiler takes
// DLT_* values, which differ from the LINKTYPE_* values in pcap files for
// raw IP: pcap_open_dead(101) fails with "unknown data link type 101".
const dltRaw = 12

// Limits of a filter from outside (CheckFilter). libpcap compiles one
// filter at a time in a process and cannot be interrupted; its
// optimizer's time grows with about the cube of the primitives a filter
// joins with and/or (docs/query.md has figures). Within these limits
// the slowest filter found compiles in a quarter of a second.
const (
	// MaxFilterLen bounds a filter's length in bytes.
	MaxFilterLen = 4096
	// MaxFilterTerms bounds the primitives of a filter: the operators
	// and, or, && and || joining them, plus one ("port 53 or 123" is
	// two).
	MaxFilterTerms = 48
)

// compileGate admits one libpcap compile at a time. gopacket serializes
// them under a mutex of its own, which a waiter cannot leave; a waiter
// here leaves when its context ends.
var compileGate = make(chan struct{}, 1)

// compiles counts the compiles run (FilterCompiles).
var compiles atomic.Uint64

// FilterCompiles returns how many filters libpcap compiled in this
// process, for metrics and tests.
func FilterCompiles() uint64 { return compiles.Load() }

// CheckFilter reports whether expr is within MaxFilterLen and
// MaxFilterTerms, without compiling it. Its error matches ErrFilterLimit
// and names the limit; an expression holding a NUL byte, which libpcap
// would compile only up to it, matches ErrBadFilter. Check a filter
// from outside (a query's, a tap client's) with it before compiling it.
func CheckFilter(expr string) error {
	if err := nulByte(expr); err != nil {
		return err
	}
	if len(expr) > MaxFilterLen {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrFilterLimit, len(expr), MaxFilterLen)
	}
	if n := filterTerms(expr); n > MaxFilterTerms {
		return fmt.Errorf("%w: %d terms (primitives joined by and/or), at most %d", ErrFilterLimit, n, MaxFilterTerms)
	}
	return nil
}

// nulByte refuses an expression holding a NUL byte: libpcap reads a C
// string and would compile what comes before it.
func nulByte(expr string) error {
	if i := strings.IndexByte(expr, 0); i >= 0 {
		return &filterError{expr: expr, msg: fmt.Sprintf("a NUL byte at offset %d", i)}
	}
	return nil
}

// filterTerms counts the and/or operators of expr, plus one: a word
// "and" or "or" (any case) or "&&" or "||". A word is what lies between
// blanks, parentheses, brackets and operator characters, as libpcap's
// scanner splits them; a word that is not an operator costs nothing
// here.
func filterTerms(expr string) int {
	const sep = " \t\n\r()[]!&|<>=+*/%^"
	n := 1
	for i := 0; i < len(expr); {
		switch c := expr[i]; {
		case (c == '&' || c == '|') && i+1 < len(expr) && expr[i+1] == c:
			n++
			i += 2
		case indexByte(sep, c):
			i++
		default:
			j := i
			for j < len(expr) && !indexByte(sep, expr[j]) {
				j++
			}
			if w := expr[i:j]; len(w) <= 3 && (equalFold(w, "and") || equalFold(w, "or")) {
				n++
			}
			i = j
		}
	}
	return n
}

func indexByte(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return true
		}
	}
	return false
}

// equalFold compares ASCII words without case.
func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if a[i]|0x20 != b[i] {
			return false
		}
	}
	return true
}

// CompileFilter compiles a filter expression in tcpdump (pcap-filter(7))
// syntax into a classic BPF program for frames of the given LINKTYPE_*
// (as returned by Handle.LinkType), accepting at most snapLen bytes of each
// packet. snapLen 0 means DefaultSnapLen. The empty expression yields a
// program that accepts everything. Use it to validate a filter before
// calling Open; errors from libpcap match ErrBadFilter and carry its
// message; so does an expression holding a NUL byte. It needs cgo;
// without it only "" compiles. It waits for the compiles before it
// (CompileFilterContext).
func CompileFilter(linkType uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	return CompileFilterContext(context.Background(), linkType, snapLen, expr)
}

// CompileFilterContext is CompileFilter, one compile at a time in the
// process, and ctx ends the wait: for the compiles before it, and for
// its own (which then goes on to its end, the next waiting behind it,
// its program dropped). The error of an ended wait wraps the context's
// error and says which wait it was. It checks no limit: CheckFilter does.
func CompileFilterContext(ctx context.Context, linkType uint16, snapLen int, expr string) ([]bpf.RawInstruction, error) {
	if snapLen == 0 {
		snapLen = DefaultSnapLen
	}
	if snapLen < 0 || snapLen > MaxSnapLen {
		return nil, invalidf("capture: snaplen %d out of range 1..%d", snapLen, MaxSnapLen)
	}
	if err := nulByte(expr); err != nil {
		return nil, err
	}
	dlt := linkType
	if linkType == LinkTypeRaw {
		dlt = dltRaw
	}
	return compileGated(ctx, expr, func() ([]bpf.RawInstruction, error) { return compile(dlt, snapLen, expr) })
}

// CompileFileFilterContext compiles expr as tcpdump -r compiles it for
// a file of the given LINKTYPE_* value: libpcap's program for a pcap
// file of that link type, byte order (swapped: the file's is not this
// host's, which changes how a DLT_NULL header's address family is
// compared) and snapshot length MaxSnapLen, with netmask 0 ("ip
// broadcast" compiles, as tcpdump -r has it). It differs from
// CompileFilterContext where libpcap tells a file from a live capture:
// "ip6" on DLT_NULL and DLT_LOOP matches every BSD AF_INET6 value a
// file may hold (24, 28, 30), not only this host's. Errors match
// ErrBadFilter and carry libpcap's message; ctx ends the wait as for
// CompileFilterContext. It checks no limit: CheckFilter does.
func CompileFileFilterContext(ctx context.Context, linkType uint16, swapped bool, expr string) ([]bpf.RawInstruction, error) {
	return compileGated(ctx, expr, func() ([]bpf.RawInstruction, error) { return compileFile(linkType, swapped, expr) })
}

// compileGated runs compile one at a time in the process (compileGate),
// ctx ending the wait.
func compileGated(ctx context.Context, expr string, compile func() ([]bpf.RawInstruction, error)) ([]bpf.RawInstruction, error) {
	if err := acquireCompiler(ctx); err != nil {
		return nil, err
	}
	type result struct {
		prog []bpf.RawInstruction
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer func() { <-compileGate }()
		compiles.Add(1)
		prog, err := compile()
		done <- result{prog, err}
	}()
	select {
	case r := <-done:
		return r.prog, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("capture: compiling filter %.64q: %w", expr, context.Cause(ctx))
	}
}

// acquireCompiler takes compileGate unless ctx ends first (or has).
func acquireCompiler(ctx context.Context) error {
	select {
	case <-ctx.Done():
	default:
		select {
		case compileGate <- struct{}{}:
			return nil
		case <-ctx.Done():
		}
	}
	return fmt.Errorf("capture: waiting for the filter compiler: %w", context.Cause(ctx))
}
