// Package capgen writes captures for the differential test of pcapsync
// query against libpcap (test/difftest): from a seed, pcap files of the
// link types users meet (Ethernet with VLAN, QinQ, MPLS and PPPoE
// session tags, Linux cooked v1 and v2, raw IP, IPv4 and IPv6 only, BSD
// null in both byte orders and loop, 802.11 and radiotap) carrying IPv4
// (options, fragments, a header length below 5), IPv6 (hop-by-hop,
// routing, fragment and destination options headers), TCP, UDP, ICMP,
// ICMPv6, SCTP, IGMP, GRE, IPIP, 6in4 and ARP, with addresses and ports
// drawn from small pools so that host, net and port filters hit, packets
// cut by a snaplen at every offset of their headers, inconsistent
// packets (an IPv4 ethertype before an IPv6 header, an unknown address
// family) and timestamps that tie, within a capture and across captures
// of the same Start, and go back in time, a little and a lot.
//
// It also makes the filters the test runs on them: a fixed list of the
// classic forms of pcap-filter(7), each labelled with a class, and
// random compositions of the capture's own addresses and ports.
//
// The same Config always gives the same capture. Nothing here is safe
// for concurrent use of one Capture, and nothing is on the product's
// paths: only tests import it.
package capgen
