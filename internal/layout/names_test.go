package layout

import "testing"

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
	}
}
