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
	// DefaultRingTime is how long a stall of the reader the ring holds by
	// default (Config.RingTime): 1 s, the goal, with half as much again
	// as margin.
	DefaultRingTime = 1500 * time.Millisecond
	// MaxTimedRing bounds a ring sized by time (RingSize 0), for very
	// short block timeouts; an explicit RingSize is not bounded by it.
	MaxTimedRing = 256 << 20
	// DesignPacketRate and DesignFrameSize are the traffic a ring sized
	// by time holds for RingTime: 20 000 packets/s of 600-byte frames
	// (about 96 Mbit/s), moderate traffic for one interface. Faster
	// traffic fills blocks before their timeout, and the ring then holds
	// RingSize bytes: a shorter stall.
	DesignPacketRate = 20000
	DesignFrameSize  = 600
	// DefaultBlockSize is the default ring block size in bytes: 128 KiB,
	// the smallest power of two that holds LargestFrame, so that the
	// default snapshot length, DefaultSnapLen, stands (see SnapLen); and
	// no larger, so that a ring of many blocks (one retires every
	// BlockTimeout, however little it holds) stays small. A block that
	// holds DefaultSnapLen bytes (512 KiB) would make the agent's ring of
	// 500 blocks 250 MiB.
	DefaultBlockSize = 128 << 10
	// LargestFrame is the longest frame Linux hands a packet socket
	// without BIG TCP (an interface's gro_max_size or gso_max_size
	// raised above 64 KiB) or an MTU above 64 KiB: an IP packet of at most 65535 bytes, its
	// length field's limit, which bounds GRO and GSO aggregates and
	// loopback's 64 KiB MTU too, and a link header (Ethernet with two
	// VLAN tags: 22 bytes), with margin. A ring whose blocks hold it
	// keeps every packet whole up to the snapshot length.
	LargestFrame = 65535 + 64
	// MaxBlockSize is the largest accepted block size.
	MaxBlockSize = 1 << 30
	// DefaultBlockTimeout is the default TPACKET_V3 block retire timeout.
	DefaultBlockTimeout = 10 * time.Millisecond
	// MaxBlockTimeout is the largest accepted block retire timeout.
	MaxBlockTimeout = time.Minute
	// DefaultPollTimeout is how long ReadInto waits by default before it
	// returns ErrTimeout.
	DefaultPollTimeout = 100 * time.Millisecond

	// BlockOverhead is the room a block needs besides one packet: the
	// block descriptor (48 bytes), the tpacket3_hdr and sockaddr_ll in
	// front of the packet (80 bytes) and the padding that aligns the
	// network header, with margin. The kernel cuts a packet longer than
	// its block holds; the snapshot length in effect is therefore at
	// most BlockSize-BlockOverhead.
	BlockOverhead = 256
	// ringPacketOverhead is what one packet takes in a block besides its
	// bytes: the tpacket3_hdr, sockaddr_ll and alignment.
	ringPacketOverhead = 96

	// minBlocks is the smallest ring: with a single block the kernel has
	// nowhere to write while the reader holds it.
	minBlocks = 2
	// maxPollSlice bounds one poll(2) inside ReadInto, and so how long
	// Close waits for a blocked reader.
	maxPollSlice = 50 * time.Millisecond
	// maxIfaceName is IFNAMSIZ-1.
	maxIfaceName = 15

	// maxFillRate is the fastest the kernel is assumed to fill one ring:
	// 100 Gbit/s. The reader's gathering wait (settings.gather) is short
	// enough that the ring does not fill during it at this rate.
	maxFillRate = 100e9 / 8 // bytes per second
	// minGather is the shortest gathering wait, and its unit: the Go
	// runtime's timers wake a sleeping goroutine in whole milliseconds
	// (epoll_wait's unit), so a shorter or fractional sleep would be
	// rounded up past the wait that is safe. A ring too small for it
	// wakes its reader for every block.
	minGather = time.Millisecond
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
	// The kernel cuts a packet longer than a ring block holds
	// (BlockSize-BlockOverhead bytes). The snapshot length in effect
	// (Handle.SnapLen) is therefore SnapLen when a block holds
	// min(SnapLen, LargestFrame) bytes, as the default block size does
	// for every snapshot length, and BlockSize-BlockOverhead otherwise
	// (65280 bytes with 64 KiB blocks). On an interface whose frames can
	// be longer than LargestFrame (BIG TCP: its gro_max_size or
	// gso_max_size above 64 KiB; or an MTU above 64 KiB) Open takes its
	// longest frame, as rtnetlink gives its limits, instead: there the
	// default blocks make 130816 bytes the snapshot length in effect.
	SnapLen int

	// NoPromisc turns promiscuous mode off. By default it is on, as in
	// tcpdump; it is dropped by the kernel when the handle closes.
	NoPromisc bool

	// RingSize is the size in bytes of the memory ring shared with the
	// kernel, all of it resident while the handle is open. It is rounded
	// up to a whole number of blocks, and to at least two blocks. 0 means
	// sized by RingTime.
	RingSize int

	// RingTime sizes the ring when RingSize is 0: it holds what arrives
	// during a stall of the reader this long, at DesignPacketRate frames
	// of DesignFrameSize bytes. The kernel hands over a block, however
	// little it holds, every BlockTimeout, so the ring gets
	// RingTime/BlockTimeout blocks at least, and room for RingTime of the
	// design traffic at least; at most MaxTimedRing bytes. 0 means
	// DefaultRingTime (with the default block size and a 3 ms block
	// timeout: 500 blocks, 62.5 MiB). RingSize and RingTime exclude each
	// other.
	RingTime time.Duration

	// BlockSize is the size of one ring block in bytes. It must be a
	// multiple of the page size (os.Getpagesize()) and at most
	// MaxBlockSize; a power of two wastes no kernel memory (the kernel
	// allocates each block in a power of two of pages). A packet longer
	// than BlockSize-BlockOverhead is cut by the kernel, its original
	// length kept (see SnapLen). 0 means DefaultBlockSize.
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
	block := orDefault(c.BlockSize, DefaultBlockSize)
	switch {
	case c.BlockSize < 0 || c.BlockSize > MaxBlockSize:
		return invalidf("capture: block size %d out of range %d..%d", c.BlockSize, page, MaxBlockSize)
	case block%page != 0:
		return invalidf("capture: block size %d is not a multiple of the page size %d", block, page)
	}
	if c.RingSize < 0 {
		return invalidf("capture: ring size %d is negative", c.RingSize)
	}
	if c.RingTime < 0 || c.RingTime > MaxBlockTimeout {
		return invalidf("capture: ring time %v out of range 0..%v", c.RingTime, MaxBlockTimeout)
	}
	if c.RingSize != 0 && c.RingTime != 0 {
		return invalidf("capture: ring size and ring time exclude each other")
	}
	if c.BlockTimeout != 0 && (c.BlockTimeout < time.Millisecond || c.BlockTimeout > MaxBlockTimeout) {
		return invalidf("capture: block timeout %v out of range %v..%v", c.BlockTimeout, time.Millisecond, MaxBlockTimeout)
	}
	// The kernel counts frames of one page in a uint32.
	if n := c.settings().numBlocks; uint64(n)*uint64(block/page) > 1<<32-1 {
		return invalidf("capture: ring size %d too large (%d blocks of %d bytes)", c.RingSize, n, block)
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
	// gather is how long the reader sleeps after a block handed over
	// full, to take the blocks that fill meanwhile in one wakeup: at most
	// a block timeout (what a packet may wait in a block anyway) and a
	// poll slice, and at most the time the kernel takes to fill the free
	// ring at maxFillRate, so the ring cannot fill during the wait. 0: no
	// gathering, a wakeup per block.
	gather time.Duration
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
	s.snapLen = snapInEffect(s.snapLen, s.blockSize, LargestFrame)
	ring := c.RingSize
	if ring == 0 {
		ring = timedRing(orDefault(c.RingTime, DefaultRingTime), max(s.blockTimeout, time.Millisecond), s.blockSize)
	}
	s.numBlocks = numBlocks(ring, s.blockSize)
	s.pollSlice, s.pollSlices = pollSlices(orDefault(c.PollTimeout, DefaultPollTimeout))
	s.gather = gatherWait(s.numBlocks, s.blockSize, max(s.blockTimeout, time.Millisecond), s.pollSlice)
	return s
}

// snapInEffect is the snapshot length a ring of blocks of size block
// keeps of snap (Config.SnapLen) on an interface whose frames are at
// most largest bytes: snap itself when a block holds every frame up to
// it, or else what a block holds.
func snapInEffect(snap, block, largest int) int {
	if room := block - BlockOverhead; room < min(snap, largest) {
		return room
	}
	return snap
}

// gatherWait returns settings.gather for a ring of n blocks of size
// block. While the reader waits it holds no block, and the kernel fills
// the one after the block it last took: the other n-1 are free.
func gatherWait(n, block int, tov, slice time.Duration) time.Duration {
	safe := time.Duration(float64(n-1) * float64(block) / maxFillRate * float64(time.Second))
	g := min(tov, slice, safe).Truncate(minGather)
	if g < minGather {
		return 0
	}
	return g
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

// timedRing returns the ring size, in bytes, that holds a stall of d:
// a block for every retire timeout tov, and room for d of the design
// traffic; at most MaxTimedRing.
func timedRing(d, tov time.Duration, block int) int {
	byTime := int((d + tov - 1) / tov)
	bytes := int(d.Seconds() * DesignPacketRate * (DesignFrameSize + ringPacketOverhead))
	byBytes := (bytes + block - 1) / block
	return min(max(byTime, byBytes)*block, max(MaxTimedRing/block, minBlocks)*block)
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
