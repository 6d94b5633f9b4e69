package pcapfile

import "testing"

func TestMaxCapLen(t *testing.T) {
	for _, tc := range []struct {
		name     string
		linkType uint32
		want     uint32
	}{
		{"null", 0, 262144},
		{"ethernet", 1, 262144},
		{"raw ip", 101, 262144},
		{"linux sll", 113, 262144},
		{"usb linux mmapped", 220, 262144},
		{"dbus", 231, 128 << 20},
		{"usbpcap", 249, 128 << 20},
		{"ebhscr", 279, 8 << 20},
		{"netlink", 253, 262144},
		{"ethernet with fcs flags", 1 | 0x1<<28 | 4<<28, 262144},
		{"dbus with high bits", 231 | 1<<16, 128 << 20},
		{"largest", 0xffff, 262144},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := MaxCapLen(tc.linkType); got != tc.want {
				t.Errorf("MaxCapLen(%d) = %d, want %d", tc.linkType, got, tc.want)
			}
		})
	}
}
