package capture

import (
	"fmt"
	"os"
	"strings"
	"time"
	"unicode"
)

// Defaults and limits applied by Config.
const (
	// DefaultSnapLen is tcpdump's default snapshot length.
	DefaultSnapLen = 262144
	// MaxSnapLen is the largest accepted snapshot length (libpcap's
	// MAXIMUM_SNAPLEN).
	MaxSnapLen = 262144
	// DefaultRingSize is the default size of the TPACKET_V3 ring in bytes.
	DefaultRingSize = 32 << 20
	// DefaultBlockSize is the default ring block size in bytes.
	DefaultBlockSize = 1 << 20
	// MaxBlockSize is the largest accepted block size.
	MaxBlockSize = 1 << 30
	// DefaultBlockTimeout is the default TPACKET_V3 block retire timeout.
	DefaultBlockTimeout = 10 * time.Millisecond
	// MaxBlockTimeout is the largest accepted block retire timeout.
	MaxBlockTimeout = time.Minute
	// DefaultPollTimeout is how long ReadInto waits by default before it
	// returns ErrTimeout.
	DefaultPollTimeout = 100 * time.Millisecond

	// BlockOverhead is the room a block needs besides one packet of
	// SnapLen bytes: the block descriptor (48 bytes), the tpacket3_hdr and
	// sockaddr_ll in front of the packet (80 bytes) and the padding that
	// aligns the network header, with margin. A block must hold at least
	// SnapLen+BlockOverhead bytes, rounded up to the page size, or the
	// kernel silently truncates large packets below SnapLen.
	BlockOverhead = 256

	// minBlocks is the smallest ring: with a single block the kernel has
	// nowhere to write while the reader holds it.
	minBlocks = 2
	// maxPollSlice bounds one poll(2) inside ReadInto, and so how long
	// Close waits for a blocked reader.
	maxPollSlice = 50 * time.Millisecond
	// maxIfaceName is IFNAMSIZ-1.
	maxIfaceName = 15
)

// Config describes a capture. The zero value of every field except Interface
// means the default; a zero Config plus an interface name captures whole
// packets, unfiltered, in promiscuous mode, like tcpdump -i NAME.
type Config struct {
	// Interface is the name of the interface to capture on. Required. It is
	// looked up in the network namespace of the OS thread that calls Open.
	Interface string

	// Filter is a filter expression in tcpdump (pcap-filter(7)) syntax,
	// compiled by libpcap and run in the kernel. "" captures everything.
	Filter string

	// SnapLen is the most bytes kept of each packet, 1..MaxSnapLen.
	// 0 means DefaultSnapLen. Packet.OrigLen keeps the length on the wire.
	SnapLen int

	// NoPromisc turns promiscuous mode off. By default it is on, as in
	// tcpdump; it is dropped by the kernel when the handle closes.
	NoPromisc bool

	// RingSize is the size in bytes of the memory ring shared with the
	// kernel. It is rounded up to a whole number of blocks, and to at least
	// two blocks. 0 means DefaultRingSize.
	RingSize int

	// BlockSize is the size of one ring block in bytes. It must be a
	// multiple of the page size (os.Getpagesize()), at most MaxBlockSize,
	// and at least SnapLen+BlockOverhead rounded up to the page size
	// (266240 bytes for the default SnapLen with 4 KiB pages), so that a
	// block can hold one whole packet. 0 means DefaultBlockSize.
	BlockSize int

	// BlockTimeout is the TPACKET_V3 block retire timeout: a block that is
	// not full is handed to the reader this long after it was opened, so
	// it bounds the latency of a packet on a quiet link. The kernel counts
	// it in whole milliseconds (the rest is dropped); 1ms..MaxBlockTimeout.
	// 0 means DefaultBlockTimeout.
	BlockTimeout time.Duration

	// PollTimeout is how long ReadInto waits for a packet before it returns
	// ErrTimeout; at least 1ms, in whole milliseconds (rounded up).
	// 0 means DefaultPollTimeout. A negative value means wait until a
	// packet arrives or the handle is closed.
	PollTimeout time.Duration
}

// Validate reports whether c is usable, without touching the system (it
// does not check that the interface exists or that the filter compiles).
// Every error it returns matches ErrInvalidConfig.
func (c *Config) Validate() error {
	if err := validateInterface(c.Interface); err != nil {
		return err
	}
	if c.SnapLen < 0 || c.SnapLen > MaxSnapLen {
		return invalidf("capture: snaplen %d out of range 1..%d", c.SnapLen, MaxSnapLen)
	}
	page := os.Getpagesize()
	snap := orDefault(c.SnapLen, DefaultSnapLen)
	block := orDefault(c.BlockSize, DefaultBlockSize)
	switch minBlock := minBlockSize(snap, page); {
	case c.BlockSize < 0 || c.BlockSize > MaxBlockSize:
		return invalidf("capture: block size %d out of range %d..%d", c.BlockSize, minBlock, MaxBlockSize)
	case block%page != 0:
		return invalidf("capture: block size %d is not a multiple of the page size %d", block, page)
	case block < minBlock:
		return invalidf("capture: block size %d smaller than %d, the minimum for snaplen %d (snaplen+%d rounded up to the %d-byte page size)",
			block, minBlock, snap, BlockOverhead, page)
	}
	if c.RingSize < 0 {
		return invalidf("capture: ring size %d is negative", c.RingSize)
	}
	// The kernel counts frames of one page in a uint32.
	if n := numBlocks(orDefault(c.RingSize, DefaultRingSize), block); uint64(n)*uint64(block/page) > 1<<32-1 {
		return invalidf("capture: ring size %d too large (%d blocks of %d bytes)", c.RingSize, n, block)
	}
	if c.BlockTimeout != 0 && (c.BlockTimeout < time.Millisecond || c.BlockTimeout > MaxBlockTimeout) {
		return invalidf("capture: block timeout %v out of range %v..%v", c.BlockTimeout, time.Millisecond, MaxBlockTimeout)
	}
	if c.PollTimeout > 0 && c.PollTimeout < time.Millisecond {
		return invalidf("capture: poll timeout %v below %v (poll(2) counts whole milliseconds)", c.PollTimeout, time.Millisecond)
	}
	return nil
}

// validateInterface applies the kernel's dev_valid_name rules.
func validateInterface(name string) error {
	switch {
	case name == "":
		return invalidf("capture: interface name is required")
	case len(name) > maxIfaceName:
		return invalidf("capture: interface name %q longer than %d bytes", name, maxIfaceName)
	case name == "." || name == "..":
		return invalidf("capture: invalid interface name %q", name)
	case strings.ContainsFunc(name, func(r rune) bool { return r == '/' || r == ':' || r == 0 || unicode.IsSpace(r) }):
		return invalidf("capture: invalid interface name %q: contains '/', ':', NUL or white space", name)
	}
	return nil
}

// settings is a validated Config with the defaults filled in.
type settings struct {
	iface        string
	filter       string
	snapLen      int
	promisc      bool
	blockSize    int
	numBlocks    int
	blockTimeout time.Duration
	// pollSlice is the timeout of one poll(2); pollSlices of them make up
	// PollTimeout. pollSlices == 0 means wait forever.
	pollSlice  time.Duration
	pollSlices int
}

// settings returns c with defaults applied. c must have passed Validate.
func (c *Config) settings() settings {
	s := settings{
		iface:        c.Interface,
		filter:       c.Filter,
		snapLen:      orDefault(c.SnapLen, DefaultSnapLen),
		promisc:      !c.NoPromisc,
		blockSize:    orDefault(c.BlockSize, DefaultBlockSize),
		blockTimeout: orDefault(c.BlockTimeout, DefaultBlockTimeout).Truncate(time.Millisecond),
	}
	s.numBlocks = numBlocks(orDefault(c.RingSize, DefaultRingSize), s.blockSize)
	s.pollSlice, s.pollSlices = pollSlices(orDefault(c.PollTimeout, DefaultPollTimeout))
	return s
}

// pollSlices splits a poll timeout into n equal polls of at most
// maxPollSlice, each a whole number of milliseconds, so that n*slice >= d.
// A negative d yields n == 0: poll forever in slices of maxPollSlice.
func pollSlices(d time.Duration) (slice time.Duration, n int) {
	if d < 0 {
		return maxPollSlice, 0
	}
	n = int((d + maxPollSlice - 1) / maxPollSlice)
	slice = (d + time.Duration(n) - 1) / time.Duration(n)
	slice = (slice + time.Millisecond - 1).Truncate(time.Millisecond)
	return slice, n
}

func numBlocks(ring, block int) int {
	n := ring / block
	if ring%block != 0 {
		n++
	}
	return max(n, minBlocks)
}

func minBlockSize(snapLen, page int) int {
	return (snapLen + BlockOverhead + page - 1) / page * page
}

func orDefault[T int | time.Duration](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

func invalidf(format string, args ...any) error {
	return &configError{msg: fmt.Sprintf(format, args...)}
}
