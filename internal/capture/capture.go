package capture

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// LINKTYPE values (https://www.tcpdump.org/linktypes.html) that Handle
// reports.
const (
	LinkTypeEthernet = 1   // LINKTYPE_ETHERNET (DLT_EN10MB)
	LinkTypeRaw      = 101 // LINKTYPE_RAW: packets start with an IPv4 or IPv6 header
)

// ARPHRD values (linux/if_arp.h) that have a LINKTYPE here.
const (
	arphrdEther    = 1
	arphrdLoopback = 772
	arphrdNone     = 65534
)

// Packet is one captured packet.
type Packet struct {
	// Timestamp is when the kernel received the packet, in nanoseconds
	// since the Unix epoch.
	Timestamp int64
	// OrigLen is the length of the packet on the wire, which can exceed
	// len(Data) when the packet was cut to the snapshot length.
	OrigLen uint32
	// Data holds the first min(OrigLen, SnapLen) bytes of the packet,
	// starting with the link-layer header described by Handle.LinkType.
	// After ReadInto it aliases the kernel ring (see ReadInto).
	Data []byte
}

// Stats are the kernel's counters for a Handle (PACKET_STATISTICS) and
// the reader's, cumulative since Open returned.
type Stats struct {
	// Received counts the packets that passed the filter, including
	// those then dropped (tcpdump's "packets received by filter").
	Received uint64
	// Dropped counts the packets that passed the filter but found the
	// ring full (tcpdump's "packets dropped by kernel").
	Dropped uint64
	// QueueFreezes counts the times the kernel found the ring full and
	// stopped filling it until the reader freed a block.
	QueueFreezes uint64

	// Blocks counts the ring blocks the reader took from the kernel.
	Blocks uint64
	// Wakeups counts the times the reader slept waiting for a block: in
	// poll(2), which the kernel ends when it hands a block over, or in a
	// gathering wait. Fewer wakeups than blocks means blocks were taken
	// several at a time.
	Wakeups uint64
	// Gathers counts the gathering waits, among Wakeups: after a block
	// the kernel handed over full (heavy traffic) the reader sleeps a
	// little, at most a block timeout, so it finds several blocks ready
	// when it wakes. After a block handed over on its timeout (light
	// traffic) it does not: it wakes as soon as the next block is ready.
	Gathers uint64
}

// rawStats are the platform's cumulative counters: the kernel's 32-bit
// ones and the reader's.
type rawStats struct {
	packets, drops, freezes  uint32
	blocks, wakeups, gathers uint64
}

// errPollSlice is what ring.read returns when one poll slice expired.
var errPollSlice = errors.New("poll slice expired")

// Handle is an open capture on one interface.
//
// A Handle comes from Open; the zero value is not usable. ReadInto, Stats
// and Close may be called from different goroutines. Calls to ReadInto are
// serialized; one reader goroutine is the intended use. Name, LinkType and
// SnapLen never change.
type Handle struct {
	name       string
	linkType   uint16
	snapLen    int
	pollSlices int // 0: ReadInto waits until a packet arrives or Close

	// closed is set first thing by Close. ReadInto checks it after every
	// poll slice, so a blocked reader gives up within one slice.
	closed atomic.Bool

	// readMu is held by ReadInto for its whole call. Close takes it to wait
	// for a blocked reader to leave before it unmaps the ring, so a reader
	// never touches a closed ring. Lock order: readMu, then mu.
	readMu sync.Mutex
	// downErr, guarded by readMu, is the ErrInterfaceDown error that
	// ReadInto returns from then on.
	downErr error

	// mu guards the counters below and, together with readMu, r: r is only
	// set to nil (by Close) with both held, so holding either one is enough
	// to read it.
	mu    sync.Mutex
	r     *ring
	last  rawStats // the platform's counters when last read
	total Stats
}

// Open starts a capture as described by cfg. The socket is created in, and
// the interface looked up in, the network namespace of the calling OS
// thread; to capture in another namespace, lock the goroutine to its
// thread (runtime.LockOSThread), setns(2) into the namespace, call Open,
// and switch back: the handle stays bound to the namespace it was opened in.
//
// Open installs a filter that rejects everything, throws away what reached
// the ring before it (waiting up to about 2*BlockTimeout for the kernel to
// hand over its last partly filled block), and only then installs the real
// filter, so no packet that fails the filter or exceeds the snapshot length
// is ever returned. It therefore takes a few tens of milliseconds.
//
// Open needs CAP_NET_RAW, and nothing else (promiscuous mode included);
// without it Open returns an error matching ErrPermission that says how
// to grant it. The handle keeps working once the capability is given
// up: the kernel checks it only when the socket is created.
func Open(cfg Config) (*Handle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := cfg.settings()
	arphrd, err := interfaceType(s.iface)
	if err != nil {
		return nil, fmt.Errorf("capture: opening %q: %w", s.iface, err)
	}
	// BIG TCP or an MTU above 64 KiB makes frames longer than
	// LargestFrame, which settings assumed.
	s.snapLen = snapInEffect(orDefault(cfg.SnapLen, DefaultSnapLen), s.blockSize, largestFrame(s.iface))
	lt, ok := linkTypeFor(arphrd)
	if !ok {
		return nil, fmt.Errorf("capture: opening %q: %w: ARPHRD %d (supported: ethernet %d, loopback %d, none %d)",
			s.iface, ErrUnsupportedLinkType, arphrd, arphrdEther, arphrdLoopback, arphrdNone)
	}
	prog, err := CompileFilter(lt, s.snapLen, s.filter)
	if err != nil {
		var fe *filterError
		if errors.As(err, &fe) {
			fe.iface = s.iface
			return nil, fe
		}
		return nil, fmt.Errorf("capture: opening %q: %w", s.iface, err)
	}
	r, base, err := openRing(s, arphrd, prog)
	if errors.Is(err, ErrPermission) {
		return nil, err // self-explanatory, with the interface's name
	}
	if err != nil {
		return nil, fmt.Errorf("capture: opening %q: %w", s.iface, err)
	}
	return &Handle{
		name:       s.iface,
		linkType:   lt,
		snapLen:    s.snapLen,
		pollSlices: s.pollSlices,
		r:          r,
		last:       base,
	}, nil
}

// linkTypeFor maps an ARPHRD_* device type to the LINKTYPE_* of the frames
// an AF_PACKET SOCK_RAW socket delivers for it.
func linkTypeFor(arphrd uint16) (uint16, bool) {
	switch arphrd {
	case arphrdEther, arphrdLoopback:
		// Loopback frames carry an Ethernet header with zero addresses.
		return LinkTypeEthernet, true
	case arphrdNone:
		// tun, WireGuard and other layer-3 devices: the packet starts
		// with the IP header.
		return LinkTypeRaw, true
	}
	return 0, false
}

// ReadInto waits for the next packet and describes it in *p.
//
// It is zero-copy: p.Data aliases the ring shared with the kernel and is
// valid only until the next call to ReadInto or Close, whichever comes
// first; the ring slot is handed back to the kernel by the next call. Copy
// what must outlive that. Touching p.Data after Close returned is a
// use-after-unmap and can crash the program, so a goroutine that closes
// the handle while another reads must make sure the reader is done with
// the bytes (for example by closing from the reading goroutine, or after
// it has stopped). Frames whose 802.1Q tag the kernel stripped get it
// back, as in libpcap; for those p.Data is a copy in a scratch buffer of
// the handle (same validity), which allocates only when it must grow.
//
// ReadInto returns ErrTimeout when no packet arrived within
// Config.PollTimeout, and ErrClosed once Close was called (a blocked
// ReadInto returns ErrClosed within 50ms of Close). When the interface goes
// down or is removed it returns an error matching ErrInterfaceDown, then and
// on every later call, even if the interface comes back: Close the handle
// and Open a new one. On any error *p is zeroed. In steady state ReadInto
// does not allocate.
func (h *Handle) ReadInto(p *Packet) error {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	return h.read(p)
}

// ReadBatch is ReadInto for many packets under one lock: it waits for a
// packet like ReadInto and then also takes the packets that are ready in
// the same ring block, up to len(ps), without waiting. It returns how
// many it described in ps[:n] (at least 1 when err is nil). Their Data
// alias the ring, or the handle's scratch buffer for a frame whose VLAN
// tag was put back (a batch holds at most one such frame, as its last),
// and all stay valid until the next ReadInto, ReadBatch or Close.
// In steady state ReadBatch does not allocate.
func (h *Handle) ReadBatch(ps []Packet) (int, error) {
	if len(ps) == 0 {
		return 0, nil
	}
	h.readMu.Lock()
	defer h.readMu.Unlock()
	if err := h.read(&ps[0]); err != nil {
		return 0, err
	}
	n := 1
	for n < len(ps) && h.r.ready() {
		if err := h.r.read(&ps[n]); err != nil {
			break // cannot happen while ready: the block is in hand
		}
		n++
	}
	return n, nil
}

// ReadPacket is the copying twin of ReadInto: it reads the next packet and
// copies its bytes into buf[:0] (growing it when too small), so the
// returned Data belongs to the caller and stays valid across later reads
// and Close. Pass the previous Data back as buf to reuse its memory; then
// it allocates only when a packet is larger than any before. Errors are as
// for ReadInto.
func (h *Handle) ReadPacket(buf []byte) (Packet, error) {
	h.readMu.Lock()
	defer h.readMu.Unlock()
	var p Packet
	if err := h.read(&p); err != nil {
		return Packet{}, err
	}
	// Copy while holding readMu: Close cannot unmap the ring meanwhile.
	p.Data = append(buf[:0], p.Data...)
	return p, nil
}

// read implements ReadInto; h.readMu must be held.
func (h *Handle) read(p *Packet) error {
	for n := 1; ; n++ {
		if h.closed.Load() {
			*p = Packet{}
			return ErrClosed
		}
		if h.downErr != nil {
			*p = Packet{}
			return h.downErr
		}
		err := h.r.read(p)
		if err == nil {
			return nil
		}
		*p = Packet{}
		if err != errPollSlice {
			err = h.readError(err)
			if errors.Is(err, ErrInterfaceDown) {
				h.downErr = err
			}
			return err
		}
		if n == h.pollSlices {
			if h.closed.Load() {
				return ErrClosed
			}
			return ErrTimeout
		}
	}
}

func (h *Handle) readError(err error) error {
	if h.closed.Load() {
		return ErrClosed
	}
	return fmt.Errorf("capture: reading %s: %w", h.name, err)
}

// Stats returns the kernel's and the reader's counters, cumulative since
// Open (the blocks Open drained are not counted). It may be
// called while another goroutine is in ReadInto, and after Close, when it
// returns the counters as they were when the handle closed.
//
// The kernel keeps 32-bit counters and resets them on every read; they are
// accumulated here into 64 bits, which stays exact as long as Stats is
// called at least once every 2^32 packets.
func (h *Handle) Stats() (Stats, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r == nil {
		return h.total, nil
	}
	if err := h.updateStats(); err != nil {
		return Stats{}, fmt.Errorf("capture: reading statistics of %s: %w", h.name, err)
	}
	return h.total, nil
}

// updateStats folds the platform's counters into h.total. h.mu must be held
// and h.r non-nil.
func (h *Handle) updateStats() error {
	s, err := h.r.stats()
	if err != nil {
		return err
	}
	// Modular differences stay right when the 32-bit counters wrap.
	h.total.Received += uint64(s.packets - h.last.packets)
	h.total.Dropped += uint64(s.drops - h.last.drops)
	h.total.QueueFreezes += uint64(s.freezes - h.last.freezes)
	h.total.Blocks += s.blocks - h.last.blocks
	h.total.Wakeups += s.wakeups - h.last.wakeups
	h.total.Gathers += s.gathers - h.last.gathers
	h.last = s
	return nil
}

// Close stops the capture and releases the socket and the ring. It may be
// called concurrently with ReadInto: it marks the handle closed, waits for
// a blocked ReadInto to notice (at most one poll slice, 50ms) and return
// ErrClosed, then closes. Calling Close again does nothing and returns nil.
func (h *Handle) Close() error {
	h.closed.Store(true)
	h.readMu.Lock()
	defer h.readMu.Unlock()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r == nil {
		return nil
	}
	statsErr := h.updateStats() // keep the final counters for Stats
	err := h.r.close()
	h.r = nil
	if err != nil {
		return fmt.Errorf("capture: closing %s: %w", h.name, err)
	}
	if statsErr != nil {
		return fmt.Errorf("capture: reading final statistics of %s: %w", h.name, statsErr)
	}
	return nil
}

// Name returns the name of the interface.
func (h *Handle) Name() string { return h.name }

// LinkType returns the LINKTYPE_* value of the captured frames, for a pcap
// file header: LinkTypeEthernet for Ethernet and loopback devices,
// LinkTypeRaw for devices without a link-layer header (ARPHRD_NONE).
func (h *Handle) LinkType() uint16 { return h.linkType }

// SnapLen returns the snapshot length in effect.
func (h *Handle) SnapLen() int { return h.snapLen }
