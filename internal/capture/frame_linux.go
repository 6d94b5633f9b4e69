package capture

import (
	"encoding/binary"
	"syscall"

	"golang.org/x/sys/unix"
)

// largestFrame returns the longest frame interface name can hand a
// packet socket: LargestFrame, or more where BIG TCP lets GRO and GSO
// aggregates grow past 64 KiB (its gro_max_size, gso_max_size and their
// IPv4 twins) or the MTU is above 64 KiB, with a link header's margin.
// It asks rtnetlink in the calling thread's namespace; when that fails
// it returns LargestFrame (the interface lookup reports a bad name).
func largestFrame(name string) int {
	tab, err := syscall.NetlinkRIB(unix.RTM_GETLINK, unix.AF_UNSPEC)
	if err != nil {
		return LargestFrame
	}
	msgs, err := syscall.ParseNetlinkMessage(tab)
	if err != nil {
		return LargestFrame
	}
	for i := range msgs {
		if msgs[i].Header.Type != unix.RTM_NEWLINK {
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(&msgs[i])
		if err != nil {
			continue
		}
		if largest, ok := linkLargest(attrs, name); ok {
			return largest
		}
	}
	return LargestFrame
}

// linkLargest is largestFrame for one link's attributes, ok when they
// are name's.
func linkLargest(attrs []syscall.NetlinkRouteAttr, name string) (largest int, ok bool) {
	largest = LargestFrame
	for _, a := range attrs {
		switch a.Attr.Type {
		case unix.IFLA_IFNAME:
			ok = string(trimNUL(a.Value)) == name
		case unix.IFLA_MTU, unix.IFLA_GSO_MAX_SIZE, unix.IFLA_GRO_MAX_SIZE, unix.IFLA_GSO_IPV4_MAX_SIZE, unix.IFLA_GRO_IPV4_MAX_SIZE:
			if len(a.Value) == 4 {
				if v := int(binary.NativeEndian.Uint32(a.Value)); v > 1<<16 {
					largest = max(largest, v+linkHeaderMargin)
				}
			}
		}
	}
	return largest, ok
}

// linkHeaderMargin is what LargestFrame allows for a link header beyond
// the 65535-byte IP packet.
const linkHeaderMargin = LargestFrame - 65535

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}
