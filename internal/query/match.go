package query

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/pcapsync/pcapsync/internal/index"
)

// The index (internal/index) selects blocks by the addresses, ports and
// IP protocols their packets hold. A query derives what to ask of it
// from its tcpdump filter: a term per primitive the index can answer
// (host, src/dst host, port, tcp/udp/sctp port, tcp, udp, icmp, ip
// proto N), combined with and/or as libpcap combines them. What comes
// out is never narrower than the filter: a primitive the index cannot
// answer (not, net, portrange, vlan, byte offsets, lengths, ether
// fields, names that are not addresses, ...) is unknown; an and drops
// its unknown terms, an or with one is unknown as a whole, and an
// unknown expression selects by time only. The reader still runs the
// filter on every packet it reads.
//
// pcap-filter(7): "not" binds tightest; "and" and "or" have equal
// precedence and associate left to right, so "a or b and c" is
// "(a or b) and c".

// mterm is a node of the derived expression.
type mterm struct {
	op    mop
	addr  netip.Addr
	arp   bool // a host term libpcap also applies to ARP and RARP
	port  uint16
	proto uint8
	subs  []*mterm
}

type mop uint8

const (
	mUnknown mop = iota
	mHost
	mPort
	mProto
	mAnd
	mOr
)

var unknownTerm = &mterm{op: mUnknown}

// String is t in a compact form, for tests and logs.
func (t *mterm) String() string {
	switch t.op {
	case mHost:
		if t.arp {
			return "host(" + t.addr.String() + ",arp)"
		}
		return "host(" + t.addr.String() + ")"
	case mPort:
		return "port(" + strconv.Itoa(int(t.port)) + ")"
	case mProto:
		return "proto(" + strconv.Itoa(int(t.proto)) + ")"
	case mAnd, mOr:
		s := make([]string, len(t.subs))
		for i, c := range t.subs {
			s[i] = c.String()
		}
		name := "and"
		if t.op == mOr {
			name = "or"
		}
		return name + "(" + strings.Join(s, " ") + ")"
	}
	return "?"
}

// filterTerms derives the expression of filter; unknown when nothing
// of it can be asked of the index.
func filterTerms(filter string) *mterm {
	toks := tokenize(filter)
	if len(toks) == 0 {
		return unknownTerm
	}
	for _, t := range toks {
		switch t {
		case "vlan", "mpls", "pppoes", "pppoed", "geneve", "vxlan", "ppp", "slip":
			// Each moves the offsets of what follows into an
			// encapsulation the index may not parse.
			return unknownTerm
		}
	}
	p := &mparser{toks: toks}
	t := p.expr()
	if p.i != len(p.toks) {
		return unknownTerm // not understood as a whole
	}
	return t
}

// simplify applies what the index cannot answer: an and drops its
// unknown terms, an or with one is unknown; with arp, so is an
// unqualified IPv4 host term (the file's packets may be ARP or RARP,
// which libpcap's host matches and the index does not key).
func (t *mterm) simplify(arp bool) *mterm {
	switch t.op {
	case mHost:
		if t.arp && arp {
			return unknownTerm
		}
	case mAnd:
		var subs []*mterm
		for _, s := range t.subs {
			if s = s.simplify(arp); s.op != mUnknown {
				subs = append(subs, s)
			}
		}
		switch len(subs) {
		case 0:
			return unknownTerm
		case 1:
			return subs[0]
		}
		return &mterm{op: mAnd, subs: subs}
	case mOr:
		subs := make([]*mterm, len(t.subs))
		for i, s := range t.subs {
			if subs[i] = s.simplify(arp); subs[i].op == mUnknown {
				return unknownTerm
			}
		}
		return &mterm{op: mOr, subs: subs}
	}
	return t
}

// indexMatch is t as the index of a file is asked (see simplify for
// arp); nil: select by time only.
func (t *mterm) indexMatch(arp bool) *index.Match { return t.simplify(arp).match() }

func (t *mterm) match() *index.Match {
	switch t.op {
	case mHost:
		return index.Host(t.addr)
	case mPort:
		return index.Port(t.port)
	case mProto:
		return index.Proto(t.proto)
	case mAnd, mOr:
		ms := make([]*index.Match, len(t.subs))
		for i, s := range t.subs {
			ms[i] = s.match()
		}
		if t.op == mAnd {
			return index.And(ms...)
		}
		return index.Or(ms...)
	}
	return nil
}

// tokenize splits a filter into words (lowercased) and the symbols
// ( ) [ ] && || ! and the arithmetic and relational operators.
func tokenize(s string) []string {
	var toks []string
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case strings.HasPrefix(s[i:], "&&") || strings.HasPrefix(s[i:], "||") ||
			strings.HasPrefix(s[i:], "!=") || strings.HasPrefix(s[i:], "<=") ||
			strings.HasPrefix(s[i:], ">=") || strings.HasPrefix(s[i:], "==") ||
			strings.HasPrefix(s[i:], "<<") || strings.HasPrefix(s[i:], ">>"):
			toks = append(toks, s[i:i+2])
			i += 2
		case strings.IndexByte("()[]!&|<>=+*/%^", c) >= 0:
			toks = append(toks, s[i:i+1])
			i++
		default:
			j := i
			for j < len(s) && strings.IndexByte(" \t\n\r()[]!&|<>=+*/%^", s[j]) < 0 {
				j++
			}
			toks = append(toks, strings.ToLower(s[i:j]))
			i = j
		}
	}
	return toks
}

type mparser struct {
	toks []string
	i    int
}

func (p *mparser) peek() string {
	if p.i < len(p.toks) {
		return p.toks[p.i]
	}
	return ""
}

func isAnd(t string) bool { return t == "and" || t == "&&" }
func isOr(t string) bool  { return t == "or" || t == "||" }

// expr: unary { (and|or) unary }, left to right at equal precedence.
func (p *mparser) expr() *mterm {
	t := p.unary()
	for {
		op := p.peek()
		var kind mop
		switch {
		case isAnd(op):
			kind = mAnd
		case isOr(op):
			kind = mOr
		default:
			return t
		}
		p.i++
		r := p.unary()
		if t.op == kind {
			t = &mterm{op: kind, subs: append(t.subs[:len(t.subs):len(t.subs)], r)}
		} else {
			t = &mterm{op: kind, subs: []*mterm{t, r}}
		}
	}
}

// unary: (not|!) unary | ( expr ) | primitive. A negation, and a
// parenthesised expression that turns out to be arithmetic, are
// unknown.
func (p *mparser) unary() *mterm {
	switch p.peek() {
	case "not", "!":
		p.i++
		p.unary()
		return unknownTerm
	case "(":
		start := p.i
		p.i++
		t := p.expr()
		if p.peek() != ")" {
			p.i = start
			p.primitive()
			return unknownTerm
		}
		p.i++
		if q := p.peek(); q != "" && q != ")" && !isAnd(q) && !isOr(q) {
			// "(len - 4) > 10": arithmetic, not an expression.
			p.i = start
			p.primitive()
			return unknownTerm
		}
		return t
	}
	return p.primitive()
}

// primitive reads the tokens of one primitive (up to and, or or an
// unmatched ")" outside brackets and parentheses) and translates them.
func (p *mparser) primitive() *mterm {
	start, depth := p.i, 0
	for p.i < len(p.toks) {
		t := p.toks[p.i]
		if depth == 0 && (isAnd(t) || isOr(t) || t == ")") {
			break
		}
		switch t {
		case "(", "[":
			depth++
		case ")", "]":
			depth--
		}
		p.i++
	}
	if p.i == start {
		if p.i < len(p.toks) {
			p.i = len(p.toks) // "and" without a left side: give up
		}
		return unknownTerm
	}
	return translate(p.toks[start:p.i])
}

// protoNums are the protocol names a primitive may start with, as
// protocol terms.
var protoNums = map[string]uint8{"tcp": 6, "udp": 17, "icmp": 1, "icmp6": 58, "sctp": 132, "igmp": 2}

// ipv6Ext are the IPv6 headers the index walks past, keying only the
// protocol after them: "ip6 proto 0" cannot be asked of it.
func ipv6Ext(n uint8) bool { return n == 0 || n == 43 || n == 44 || n == 51 || n == 60 }

// translate maps one primitive, as words, to a term.
func translate(w []string) *mterm {
	var proto string
	if len(w) > 0 {
		switch w[0] {
		case "ip", "ip6", "tcp", "udp", "sctp", "icmp", "icmp6", "igmp":
			proto, w = w[0], w[1:]
		}
	}
	if len(w) == 0 {
		if n, ok := protoNums[proto]; ok {
			return &mterm{op: mProto, proto: n}
		}
		return unknownTerm
	}
	if len(w) > 0 && (w[0] == "src" || w[0] == "dst") {
		w = w[1:]
	}
	if len(w) != 2 {
		return unknownTerm
	}
	switch w[0] {
	case "host":
		a, err := netip.ParseAddr(w[1])
		if err != nil || a.Zone() != "" || a.Is4In6() {
			return unknownTerm
		}
		switch {
		case proto == "" && a.Is4():
			return &mterm{op: mHost, addr: a, arp: true}
		case proto == "" || proto == "ip" && a.Is4() || proto == "ip6" && a.Is6():
			return &mterm{op: mHost, addr: a}
		}
	case "port":
		n, err := parseNumber(w[1], 16)
		if err != nil {
			return unknownTerm
		}
		switch proto {
		case "":
			return &mterm{op: mPort, port: uint16(n)}
		case "tcp", "udp", "sctp":
			return &mterm{op: mAnd, subs: []*mterm{{op: mProto, proto: protoNums[proto]}, {op: mPort, port: uint16(n)}}}
		}
	case "proto":
		v := strings.TrimPrefix(w[1], "\\")
		var n uint8
		if k, ok := protoNums[v]; ok && v != "icmp6" && v != "igmp" {
			n = k
		} else if k, err := parseNumber(v, 8); err == nil {
			n = uint8(k)
		} else {
			return unknownTerm
		}
		if proto == "ip" || proto == "ip6" && !ipv6Ext(n) {
			return &mterm{op: mProto, proto: n}
		}
	}
	return unknownTerm
}

// parseNumber reads a number of a filter as libpcap's scanner does: 0x
// or 0X then hex digits, 0 then octal digits ("port 053" is port 43),
// else decimal; bitSize bounds it as strconv.ParseUint does.
func parseNumber(s string, bitSize int) (uint64, error) {
	base := 10
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'):
		s, base = s[2:], 16
	case len(s) > 1 && s[0] == '0':
		s, base = s[1:], 8
	}
	if s == "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, base, bitSize)
}
