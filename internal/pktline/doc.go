// Package pktline prints packets one line each, for pcapsync query
// without -w: the time, the interface (AGENT:IF, which tcpdump cannot
// show), and the fields tcpdump -n shows first, in tcpdump's words:
//
//	2026-11-27 09:15:50.123456789 web1:eth0 IP 10.0.0.1.40000 > 10.0.0.2.53: UDP, length 33
//	2026-11-27 09:15:50.200000000 web1:eth0 IP6 2001:db8::1.443 > 2001:db8::2.51000: Flags [S.], length 0
//	2026-11-27 09:15:50.300000000 web2:eth1 ARP, Request who-has 10.0.0.2 tell 10.0.0.1, length 28
//
// The time is tcpdump -tttt's with nine fractional digits, in the zone
// given (the system's or TZ by default), so that --since and --until
// take it back. After the interface: IP or IP6 with the addresses, the
// ports of TCP, UDP and SCTP when their first four bytes are captured
// (of a first fragment; later fragments show ip-proto-N), then TCP's
// flags and payload length, UDP's payload length, the ICMP and ICMPv6
// type, or the protocol's number; ARP's request or reply; for other
// frames the ethertype or link type. Ethernet (VLAN, QinQ, MPLS and
// PPPoE session tags are looked through), Linux cooked v1 and v2, raw
// IP, IPv4, IPv6, BSD null and loop, and 802.11 data frames with an
// LLC/SNAP header (also under radiotap) are decoded; other 802.11
// frames (management, control, protected, null) and other link types
// print their name and length only. What tcpdump decodes beyond
// (sequence numbers, options, DNS, HTTP) is not printed: pipe -w - into
// tcpdump -r - for it. The fields printed are checked against tcpdump
// -n over generated captures of every link type (TestTcpdump).
//
// Nothing here keeps state between packets: AppendLine is safe for
// concurrent use; a Print call reads one stream.
package pktline
