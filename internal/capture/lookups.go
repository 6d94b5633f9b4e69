package capture

import (
	"fmt"
	"net/netip"
	"strings"
)

// FilterLookups returns the words of expr that libpcap may look up by
// name in the hosts, networks or ethers databases as it compiles expr:
// "host www.example.com", a bare name, "net lab", "ether host gw",
// "gateway r1". A host name goes to the system's resolver (DNS), from
// inside the one-at-a-time compiler (compileGate), which cannot be
// interrupted: a slow name holds every compile in the process up for as
// long as the resolver takes. Words right after port, portrange, proto
// or protochain (service and protocol names, read from local files) are
// not returned; nor are keywords, numbers and addresses.
//
// It splits expr as libpcap's scanner does (the longest match, keywords
// and addresses before names) and errs on the side of returning a word:
// a name in a position libpcap would read as a service ("port 80 or
// http": http inherits port) is returned too.
func FilterLookups(expr string) []string {
	var names []string
	prev := ""
	name := func(w string) {
		if !localLookup(prev) {
			names = append(names, w)
		}
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			continue
		case c == '\\':
			// An escaped word is a name, keyword or not ("host \ip").
			j := i + 1
			for j < len(expr) && !strings.ContainsRune(" !()\n\t", rune(expr[j])) {
				j++
			}
			name(expr[i:j])
			prev, i = expr[i:j], j
			continue
		case c == '$':
			// An ARCnet address: $ and one or two hex digits.
			j := i + 1
			for j < len(expr) && j < i+3 && isHex(expr[j]) {
				j++
			}
			prev, i = expr[i:j], j
			continue
		}
		n, isName := scanToken(expr[i:])
		if n == 0 {
			prev, i = expr[i:i+1], i+1 // an operator
			continue
		}
		if isName {
			name(expr[i : i+n])
		}
		prev, i = expr[i:i+n], i+n
	}
	return names
}

// scanToken returns the length of the token at the start of s as
// libpcap's scanner reads it (the longest match; on a tie a keyword,
// an Ethernet address, a number, a dotted host number or an IPv6
// address before a name), and whether it is a name. 0: s starts with
// an operator (or a byte no token starts with).
func scanToken(s string) (n int, isName bool) {
	id := idLen(s)
	other := max(keywordLen(s), macLen(s), numLen(s), dottedLen(s), ipv6Len(s))
	if other >= id {
		return other, false
	}
	return id, true
}

// idLen: libpcap's names, [A-Za-z0-9]([-_.A-Za-z0-9]*[.A-Za-z0-9])?
func idLen(s string) int {
	if s == "" || !isAlnum(s[0]) {
		return 0
	}
	end, n := 1, 1
	for n < len(s) && (isAlnum(s[n]) || s[n] == '-' || s[n] == '_' || s[n] == '.') {
		n++
		if isAlnum(s[n-1]) || s[n-1] == '.' {
			end = n
		}
	}
	return end
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// keywordLen: the longest keyword s starts with.
func keywordLen(s string) int {
	n := 0
	for k := range filterKeywords {
		if len(k) > n && strings.HasPrefix(s, k) {
			n = len(k)
		}
	}
	return n
}

// hexRun and decRun count the hex or decimal digits at the start of s.
func hexRun(s string) int {
	n := 0
	for n < len(s) && isHex(s[n]) {
		n++
	}
	return n
}

func decRun(s string) int {
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n
}

// numLen: a number, decimal (octal with a leading 0) or 0x hex.
func numLen(s string) int {
	if len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		if h := hexRun(s[2:]); h > 0 {
			return 2 + h
		}
	}
	return decRun(s)
}

// dottedLen: two to four numbers joined by dots (10.1, 10.1.2, 10.1.2.3).
func dottedLen(s string) int {
	n := numLen(s)
	if n == 0 {
		return 0
	}
	best := 0
	for parts := 1; parts < 4 && n < len(s) && s[n] == '.'; parts++ {
		m := numLen(s[n+1:])
		if m == 0 {
			break
		}
		n += 1 + m
		best = n
	}
	return best
}

// macLen: an Ethernet address: six groups of one or two hex digits
// joined by ':', '-' or '.', three groups of four hex digits joined by
// '.', or twelve hex digits; or what libpcap's scanner takes for a
// malformed one (hex groups joined by ':'), which is no name either.
func macLen(s string) int {
	best := 0
	for _, sep := range []byte{':', '-', '.'} {
		n, groups := 0, 0
		for groups < 6 {
			h := min(hexRun(s[n:]), 2)
			if h == 0 {
				break
			}
			n += h
			groups++
			if groups < 6 {
				if n >= len(s) || s[n] != sep {
					break
				}
				n++
			}
		}
		if groups == 6 {
			best = max(best, n)
		}
	}
	if len(s) >= 14 && hexRun(s) >= 4 && s[4] == '.' && hexRun(s[5:]) >= 4 && s[9] == '.' && hexRun(s[10:]) >= 4 {
		best = max(best, 14)
	}
	if hexRun(s) >= 12 {
		best = max(best, 12)
	}
	// {B}:+({B}:+)+: "a:b:", an address libpcap refuses.
	n, groups := 0, 0
	for {
		h := min(hexRun(s[n:]), 2)
		if h == 0 || n+h >= len(s) || s[n+h] != ':' {
			break
		}
		n += h
		for n < len(s) && s[n] == ':' {
			n++
		}
		groups++
	}
	if groups >= 2 {
		best = max(best, n)
	}
	return best
}

// ipv6Len: the longest IPv6 address s starts with (at most 45 bytes:
// eight groups, the last two as a dotted IPv4 address).
func ipv6Len(s string) int {
	n := 0
	for n < min(len(s), 45) && (isHex(s[n]) || s[n] == ':' || s[n] == '.') {
		n++
	}
	if strings.IndexByte(s[:n], ':') < 0 {
		return 0
	}
	for ; n > 1; n-- {
		if a, err := netip.ParseAddr(s[:n]); err == nil && a.Is6() {
			return n
		}
	}
	return 0
}

// CheckRemoteFilter is CheckFilter for a filter from a client of a
// server (a query's, a tap client's): it also refuses a filter whose
// compile would look a name up (FilterLookups), with an error matching
// ErrFilterLimit that names the words. The server resolves nothing for
// its clients; a client gives addresses.
func CheckRemoteFilter(expr string) error {
	if err := CheckFilter(expr); err != nil {
		return err
	}
	if names := FilterLookups(expr); len(names) > 0 {
		quoted := make([]string, 0, min(len(names), 4))
		for _, n := range names[:min(len(names), 4)] {
			quoted = append(quoted, fmt.Sprintf("%.64q", n))
		}
		more := ""
		if len(names) > 4 {
			more = fmt.Sprintf(" and %d more", len(names)-4)
		}
		return fmt.Errorf("%w: %s%s would be looked up as a host, network or Ethernet name; a filter sent to a server gives addresses and numbers (names of ports and protocols right after port or proto are fine)",
			ErrFilterLimit, strings.Join(quoted, ", "), more)
	}
	return nil
}

// localLookup reports whether a name after the token prev is a service
// or protocol name (local files), not a host, network or Ethernet one.
func localLookup(prev string) bool {
	switch prev {
	case "port", "portrange", "proto", "protochain":
		return true
	}
	return false
}

// filterKeywords are libpcap's keywords, and the named constants its
// scanner reads as numbers (icmp-echo, tcp-syn, ...): words that are
// never looked up. A keyword missing here only makes FilterLookups
// return it, refusing a filter that was fine.
var filterKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
dst src link ether ppp slip fddi tr wlan arp rarp ip sctp tcp udp icmp igmp igrp pim vrrp carp radio
ip6 icmp6 ah esp atalk aarp decnet lat sca moprc mopdl iso esis es-is isis is-is l1 l2 iih lsp snp
csnp psnp clnp stp ipx netbeui host net mask port portrange proto protochain gateway type subtype
direction dir address1 addr1 address2 addr2 address3 addr3 address4 addr4 ra ta less greater byte
broadcast multicast and or not len length inbound outbound ifindex vlan mpls pppoed pppoes geneve
lane llc metac bcc oam oamf4 oamf4ec oamf4sc sc ilmic vpi vci connectmsg metaconnect on ifname
rset ruleset rnr rulenum srnr subrulenum reason action fisu lssu lsu msu hfisu hlssu hmsu sio opc dpc
sls hsio hopc hdpc hsls
icmptype icmpcode icmp-echoreply icmp-unreach icmp-sourcequench icmp-redirect icmp-echo
icmp-routeradvert icmp-routersolicit icmp-timxceed icmp-paramprob icmp-tstamp icmp-tstampreply
icmp-ireq icmp-ireqreply icmp-maskreq icmp-maskreply
icmp6type icmp6code icmp6-destinationunreach icmp6-packettoobig icmp6-timeexceeded
icmp6-parameterproblem icmp6-echo icmp6-echoreply icmp6-multicastlistenerquery
icmp6-multicastlistenerreportv1 icmp6-multicastlistenerdone icmp6-routersolicit icmp6-routeradvert
icmp6-neighborsolicit icmp6-neighboradvert icmp6-redirect icmp6-routerrenum
icmp6-nodeinformationquery icmp6-nodeinformationresponse icmp6-ineighbordiscoverysolicit
icmp6-ineighbordiscoveryadvert icmp6-multicastlistenerreportv2 icmp6-homeagentdiscoveryrequest
icmp6-homeagentdiscoveryreply icmp6-mobileprefixsolicit icmp6-mobileprefixadvert
icmp6-certpathsolicit icmp6-certpathadvert icmp6-multicastrouteradvert
icmp6-multicastroutersolicit icmp6-multicastrouterterm
tcpflags tcp-fin tcp-syn tcp-rst tcp-push tcp-ack tcp-urg tcp-ece tcp-cwr`) {
		m[w] = true
	}
	return m
}()
