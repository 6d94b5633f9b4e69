package layout

import (
	"strings"
	"testing"
)

// TestOwnFile: the names the Store makes in an agent's directory, and
// others that look like them.
func TestOwnFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		own  bool
	}{
		{"a1_20261124T090000.000Z.pcapng", true},
		{"a1_20261124T090000.000Z_001.pcapng.gz", true},
		{"a1_20261124T090000.000Z_1234.pcapng.zst", true},
		{"a1_20261124T090000.000Z.pcapng.part", true},
		{"a1_20261124T090000.000Z.pcapng.idx", true},
		{"a1_20261124T090000.000Z.pcapng.idx.part", true},
		{"a1_20261124T090000.000Z.pcapng.idx.tmp", true},
		{"a1_20261124T090000.000Z.pcapng.part.repair", true},
		{"a1_20261124T090000.000Z.pcapng.flows", true},
		{"a1_20261124T090000.000Z.pcapng.zst.flows.part", true},
		{"a1_20261124T090000.000Z.pcapng.flows.0123456789abcdef.tmp", true},
		{"a1_20261124T090000.000Z.pcapng.flows.0123456789abcdeg.tmp", false},
		{"a1_20261124T090000.000Z.pcapng.flows.flows", false},
		{"a1_20261124T090000.000Z.flows", false},
		{"a1_20261124T090000.000Z.pcapng.timeline", true},
		{"a1_20261124T090000.000Z.pcapng.gz.timeline.tmp1234567", true},
		{"a1_20261124T090000.000Z.pcapng.timeline.tmpx", false},
		{"a1_20261124T090000.000Z.pcapng.timeline.timeline", false},
		{"a1_20261124T090000.000Z_01.pcapng", false},
		{"a1_20261324T090000.000Z.pcapng", false}, // month 13
		{"a1_20261124T090000.000Z.pcap", false},
		{"a2_20261124T090000.000Z.pcapng", false},
		{"mycapture.pcapng", false},
		{".a1_20261124T090000.000Z.pcapng", false},
		{"a1_20261124T090000.000Z.pcapng.orig", false},
	} {
		if got := OwnFile("a1", tc.name); got != tc.own {
			t.Errorf("OwnFile(a1, %q) = %v, want %v", tc.name, got, tc.own)
		}
		if n := strings.TrimSuffix(tc.name, PartSuffix); strings.Contains(tc.name, ".flows") && IsDataFile("a1", n) {
			t.Errorf("IsDataFile(a1, %q): a flow file taken for a data file", n)
		}
	}
}

// TestMatchIface: patterns with a ':' over AGENT:IF, without over IF.
func TestMatchIface(t *testing.T) {
	for _, tc := range []struct {
		pats []string
		name string
		want bool
	}{
		{nil, "web1:eth0", true},
		{[]string{"eth0"}, "web1:eth0", true},
		{[]string{"eth*"}, "web1:eth1", true},
		{[]string{"web1:eth0"}, "web1:eth0", true},
		{[]string{"web*:eth0"}, "web2:eth0", true},
		{[]string{"web1:eth0"}, "web2:eth0", false},
		{[]string{"eth1", "lo"}, "web1:eth0", false},
		{[]string{"web1"}, "web1:eth0", false},
	} {
		if got := MatchIface(tc.pats, tc.name); got != tc.want {
			t.Errorf("MatchIface(%q, %q) = %v, want %v", tc.pats, tc.name, got, tc.want)
		}
	}
}

func TestIfaceName(t *testing.T) {
	for _, tc := range []struct{ agent, name, want string }{
		{"a1", "a1:eth0", "a1:eth0"}, // as the store writes it
		{"a1", "eth0", "a1:eth0"},    // a file the store did not write
		{"a1", "", "a1:"},
		{"a1", "a1:", "a1:"},
		{"a1", "a1", "a1:a1"},
		{"a1", "a10:eth0", "a1:a10:eth0"}, // another agent's prefix
		{"a1", "b1:eth0", "a1:b1:eth0"},
	} {
		if got := IfaceName(tc.agent, tc.name); got != tc.want {
			t.Errorf("IfaceName(%q, %q) = %q, want %q", tc.agent, tc.name, got, tc.want)
		}
	}
}
