package pcapfile

// Link types whose packets may be longer than MaxCapLenStandard in
// pcapng readers (LINKTYPE_* values).
const (
	LinkTypeDBus    = 231 // LINKTYPE_DBUS: D-Bus messages, up to 128 MiB
	LinkTypeUSBPcap = 249 // LINKTYPE_USBPCAP: USB transfers captured by USBPcap, up to 128 MiB
	LinkTypeEBHSCR  = 279 // LINKTYPE_EBHSCR: Elektrobit high-speed capture and replay, up to 8 MiB
)

// Captured-length limits of Wireshark's readers (wiretap), by link type.
const (
	// MaxCapLenStandard bounds the captured length of a packet of every
	// link type but the three below: tcpdump's and libpcap's largest
	// snapshot length, and the largest a reader accepts.
	MaxCapLenStandard = 262144
	MaxCapLenDBus     = 128 << 20
	MaxCapLenUSBPcap  = 128 << 20
	MaxCapLenEBHSCR   = 8 << 20
)

// MaxCapLen returns the longest captured length that readers of pcap and
// pcapng files (Wireshark, tshark, capinfos) accept for a packet of the
// given link type; a longer packet makes the file unreadable from that
// packet on. Only the low 16 bits of linkType count (a classic pcap
// header keeps FCS flags above them).
//
// The rule from capture to file is one: a packet longer than this is cut
// to MaxCapLen bytes with its original length kept, like a snapshot
// length, and counted where it is cut.
func MaxCapLen(linkType uint32) uint32 {
	switch linkType & 0xffff {
	case LinkTypeDBus:
		return MaxCapLenDBus
	case LinkTypeUSBPcap:
		return MaxCapLenUSBPcap
	case LinkTypeEBHSCR:
		return MaxCapLenEBHSCR
	}
	return MaxCapLenStandard
}
