package capture

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestFilterLookups: the words libpcap would look up by name, as its
// scanner splits them; the everyday filters that name nothing return
// none. TestFilterLookupsAgainstLibpcap checks it against libpcap.
func TestFilterLookups(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{"host www.example.com", []string{"www.example.com"}},
		{"src host db1 and dst host db2", []string{"db1", "db2"}},
		{"host 10.0.0.1 or db1", []string{"db1"}},
		{"net lab", []string{"lab"}},
		{"ether host gw or ether src aa:bb:cc:dd:ee:ff", []string{"gw"}},
		{"gateway r1", []string{"r1"}},
		{`host \ip`, []string{`\ip`}},
		{"host lab- or host lab_", []string{"lab", "lab"}},
		{"host len-5", []string{"len-5"}},
		{"host 1.2.3.4.5", []string{"1.2.3.4.5"}},
		{"host es-isx", []string{"es-isx"}},
		{"host TCP", []string{"TCP"}},
		{"host a:b:c:d:e:f:1x", []string{"1x"}}, // libpcap stops at the malformed address: returned all the same
		{"port 80 or http", []string{"http"}},   // libpcap looks up a service here: returned all the same
		{"port http or portrange ftp-data-ftp", nil},
		{"ip proto \\icmp or proto \\tcp", nil},
		{"host fe80::1x", []string{"x"}},
		// Everyday filters: nothing to look up.
		{"tcp port 443", nil},
		{"host 10.0.0.1 and port 53", nil},
		{"net 10.0.0.0/8 or net 192.168", nil},
		{"ether host aa:bb:cc:dd:ee:ff or ether host aabb.ccdd.eeff or ether host aa-bb-cc-dd-ee-ff", nil},
		{"ip6 and not ip6 host fe80::1 and not host ::ffff:10.0.0.1", nil},
		{"vlan 100 and tcp", nil},
		{"tcp[tcpflags] & (tcp-syn|tcp-fin) != 0", nil},
		{"icmp[icmptype] == icmp-echo or icmp6[icmp6type] == icmp6-echo", nil},
		{"ip[2:2] > 576 and len >= 100", nil},
		{"greater 1000 and less 1500 and not broadcast and not multicast", nil},
		{"udp dst port 0x35 or udp port 017", nil},
		{"ether proto 0x88cc or arp or rarp", nil},
		{"host $1f", nil},
		{"", nil},
	} {
		if got := FilterLookups(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("FilterLookups(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

func TestCheckRemoteFilter(t *testing.T) {
	err := CheckRemoteFilter("host a or host b or host c or host d or host e or host f")
	if !errors.Is(err, ErrFilterLimit) || !strings.Contains(err.Error(), `"a", "b", "c", "d" and 2 more would be looked up`) {
		t.Errorf("six names: %v", err)
	}
	if err := CheckRemoteFilter("udp port domain"); err != nil {
		t.Errorf("a service name after port: %v", err)
	}
	if err := CheckRemoteFilter(strings.Repeat("udp or ", 48) + "tcp"); !errors.Is(err, ErrFilterLimit) || !strings.Contains(err.Error(), "49 terms") {
		t.Errorf("over the terms limit: %v (CheckFilter's limits first)", err)
	}
}
