//go:build linux

package capture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ring is an AF_PACKET TPACKET_V3 socket and its mapped ring, read
// without a library in between: the kernel fills blocks of packets and
// hands each over by setting its status to TP_STATUS_USER; the reader
// walks the block's packets in place and gives the block back
// (TP_STATUS_KERNEL) when it moves on. Only the reading goroutine touches
// the cursor fields; Handle serializes reads. The status words are
// shared with the kernel and accessed atomically (ring_linux.go).
type ring struct {
	fd      int
	mem     []byte // the mapped ring: numBlocks blocks of blockSize
	blockSz int
	nBlocks int
	snapLen int
	pollMs  int
	// gather is how long the reader waits, after a block the kernel
	// handed over full, before it looks for the next one (see wait).
	gather time.Duration

	blk  int // current block
	left int // packets of the current block not yet returned
	next int // offset in mem of the next packet header
	held bool
	// gatherNext: the block taken last was handed over full, and filled
	// within r.gather/2: wait r.gather before looking for the next.
	gatherNext bool

	// The reader's counters, for Stats: blocks taken, waits for a block
	// (poll(2) and gathering waits), and the gathering waits alone.
	blocks, wakeups, gathers atomic.Uint64

	vlan     []byte // scratch for a frame with its VLAN tag put back
	vlanUsed bool   // the last packet read is in vlan

	acc rawStats // cumulative: the kernel resets its counters on every read
}

// interfaceType returns the ARPHRD_* type of the named interface. It asks
// the kernel with SIOCGIFHWADDR (as libpcap does) rather than reading
// /sys/class/net/NAME/type, because sysfs shows the network namespace it
// was mounted in, not the one of the calling thread.
func interfaceType(name string) (uint16, error) {
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoInterface, err)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("creating socket to read the link type: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFHWADDR, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return 0, ErrNoInterface
		}
		return 0, fmt.Errorf("reading the link type: %w", err)
	}
	return ifr.Uint16(), nil // ifr_hwaddr.sa_family holds dev->type
}

// rejectAll is the filter that keeps the ring empty while Open drains it.
var rejectAll = []bpf.RawInstruction{{Op: unix.BPF_RET | unix.BPF_K, K: 0}}

// openRing creates the socket and ring, drains whatever arrived before the
// filter was in place, and installs prog. It returns the kernel counters at
// the moment the real filter went in, as the baseline for Stats.
func openRing(s settings, arphrd uint16, prog []bpf.RawInstruction) (*ring, rawStats, error) {
	// Protocol 0: nothing is delivered until bind names one, so the
	// reject-all filter goes in before the first packet can.
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return nil, rawStats{}, &permError{iface: s.iface, err: err}
	}
	if err != nil {
		return nil, rawStats{}, fmt.Errorf("creating AF_PACKET socket: %w", err)
	}
	r := &ring{fd: fd, blockSz: s.blockSize, nBlocks: s.numBlocks, snapLen: s.snapLen,
		pollMs: max(1, int(s.pollSlice/time.Millisecond)), gather: s.gather}
	base, err := r.setup(s, kernelProgram(arphrd, prog))
	if err != nil {
		r.close()
		return nil, rawStats{}, err
	}
	return r, base, nil
}

func (r *ring) setup(s settings, prog []bpf.RawInstruction) (rawStats, error) {
	if err := unix.SetsockoptInt(r.fd, unix.SOL_PACKET, unix.PACKET_VERSION, unix.TPACKET_V3); err != nil {
		return rawStats{}, fmt.Errorf("selecting TPACKET_V3: %w", err)
	}
	// With TPACKET_V3 the frame size only has to divide the block size;
	// packets are packed into blocks whatever their length.
	frame := os.Getpagesize()
	req := unix.TpacketReq3{
		Block_size:     uint32(s.blockSize),
		Block_nr:       uint32(s.numBlocks),
		Frame_size:     uint32(frame),
		Frame_nr:       uint32(s.blockSize / frame * s.numBlocks),
		Retire_blk_tov: uint32(max(1, s.blockTimeout.Milliseconds())),
	}
	if err := unix.SetsockoptTpacketReq3(r.fd, unix.SOL_PACKET, unix.PACKET_RX_RING, &req); err != nil {
		return rawStats{}, fmt.Errorf("creating the ring (%d blocks of %d bytes): %w", s.numBlocks, s.blockSize, err)
	}
	mem, err := unix.Mmap(r.fd, 0, s.blockSize*s.numBlocks, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return rawStats{}, fmt.Errorf("mapping the ring: %w", err)
	}
	r.mem = mem
	if err := r.setBPF(rejectAll); err != nil {
		return rawStats{}, fmt.Errorf("attaching filter: %w", err)
	}
	ifr, err := unix.NewIfreq(s.iface)
	if err != nil {
		return rawStats{}, fmt.Errorf("%w: %w", ErrNoInterface, err)
	}
	if err := unix.IoctlIfreq(r.fd, unix.SIOCGIFINDEX, ifr); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return rawStats{}, ErrNoInterface
		}
		return rawStats{}, fmt.Errorf("looking up the interface index: %w", err)
	}
	ifindex := int(ifr.Uint32())
	if err := unix.Bind(r.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifindex}); err != nil {
		return rawStats{}, fmt.Errorf("binding to the interface: %w", err)
	}
	if s.promisc {
		mreq := unix.PacketMreq{Ifindex: int32(ifindex), Type: unix.PACKET_MR_PROMISC}
		if err := unix.SetsockoptPacketMreq(r.fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mreq); err != nil {
			return rawStats{}, fmt.Errorf("enabling promiscuous mode: %w", err)
		}
	}
	// The ring should be empty (the filter went in before bind), but
	// drain anyway: the kernel hands over a partly filled block within
	// two retire periods; wait that long, plus margin, for a quiet ring.
	deadline := time.Now().Add(2*s.blockTimeout + 10*time.Millisecond)
	var p Packet
	for {
		err := r.read(&p)
		if err == errPollSlice {
			if time.Now().After(deadline) {
				break
			}
			continue
		}
		if err != nil {
			return rawStats{}, fmt.Errorf("draining the ring: %w", err)
		}
	}
	base, err := r.stats()
	if err != nil {
		return rawStats{}, fmt.Errorf("reading statistics: %w", err)
	}
	if err := r.setBPF(prog); err != nil {
		return rawStats{}, fmt.Errorf("attaching filter: %w", err)
	}
	return base, nil
}

func (r *ring) setBPF(prog []bpf.RawInstruction) error {
	fs := make([]unix.SockFilter, len(prog))
	for i, in := range prog {
		fs[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return unix.SetsockoptSockFprog(r.fd, unix.SOL_SOCKET, unix.SO_ATTACH_FILTER, &unix.SockFprog{Len: uint16(len(fs)), Filter: &fs[0]})
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// kernelProgram adapts a libpcap program to the device. On loopback every
// packet passes an ETH_P_ALL socket twice, once outgoing and once incoming;
// like libpcap, keep only the incoming copy, by prefixing the program with
// a check of the packet type (a Linux BPF extension). Jumps in cBPF are
// relative, so the prefix leaves prog's jumps intact.
func kernelProgram(arphrd uint16, prog []bpf.RawInstruction) []bpf.RawInstruction {
	if arphrd != arphrdLoopback {
		return prog
	}
	prefix, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadExtension{Num: bpf.ExtType},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.PACKET_OUTGOING, SkipTrue: 0, SkipFalse: 1},
		bpf.RetConstant{Val: 0},
	})
	if err != nil {
		panic("capture: assembling the loopback prefix: " + err.Error())
	}
	return append(prefix, prog...)
}

// Offsets in a block descriptor (struct tpacket_block_desc with
// struct tpacket_hdr_v1) and a packet header (struct tpacket3_hdr).
const (
	bdStatus   = 8
	bdNumPkts  = 12
	bdFirstPkt = 16
	// ts_first_pkt (when the kernel opened the block) and ts_last_pkt
	// (the last packet's timestamp), seconds and nanoseconds.
	bdFirstSec  = 32
	bdFirstNsec = 36
	bdLastSec   = 40
	bdLastNsec  = 44

	phNext    = 0
	phSec     = 4
	phNsec    = 8
	phSnaplen = 12
	phLen     = 16
	phStatus  = 20
	phMac     = 24
	phVlanTCI = 32
	phVlanTPI = 36
)

// fillTime returns how long the kernel took to fill the block at offset
// base: from when it opened the block to its last packet's timestamp.
func (r *ring) fillTime(base int) time.Duration {
	b := r.mem[base:]
	sec := int64(le32(b[bdLastSec:])) - int64(le32(b[bdFirstSec:]))
	nsec := int64(le32(b[bdLastNsec:])) - int64(le32(b[bdFirstNsec:]))
	return time.Duration(sec*1e9 + nsec)
}

// read reads one packet, waiting at most one poll slice.
func (r *ring) read(p *Packet) error {
	for r.left == 0 {
		if r.held {
			// Done with the current block: give it back, move on.
			r.release(r.blk)
			r.held = false
			r.blk = (r.blk + 1) % r.nBlocks
		}
		base := r.blk * r.blockSz
		st := r.status(base)
		if st&unix.TP_STATUS_USER == 0 {
			if err := r.wait(base); err != nil {
				return err
			}
			if st = r.status(base); st&unix.TP_STATUS_USER == 0 {
				return errPollSlice
			}
		}
		r.held = true
		// Gather before the next block only after a full block that
		// filled within half the wait: then the reader finds two blocks
		// or more when it wakes. Slower blocks would give it one, or
		// none and a poll(2) after the wait: no wakeup saved.
		r.gatherNext = r.gather > 0 && st&unix.TP_STATUS_BLK_TMO == 0 && 2*r.fillTime(base) <= r.gather
		r.blocks.Add(1)
		r.left = int(le32(r.mem[base+bdNumPkts:]))
		r.next = base + int(le32(r.mem[base+bdFirstPkt:]))
	}
	h := r.mem[r.next:]
	snap, mac := int(le32(h[phSnaplen:])), int(le16(h[phMac:]))
	data := h[mac : mac+snap : mac+snap]
	origLen := le32(h[phLen:])
	r.vlanUsed = false
	if st := le32(h[phStatus:]); st&unix.TP_STATUS_VLAN_VALID != 0 && len(data) >= 12 {
		// The kernel stripped the 802.1Q tag into the header: put it
		// back, as libpcap does, in a scratch buffer.
		tpid := uint16(unix.ETH_P_8021Q)
		if st&unix.TP_STATUS_VLAN_TPID_VALID != 0 {
			tpid = le16(h[phVlanTPI:])
		}
		tci := uint16(le32(h[phVlanTCI:]))
		r.vlan = append(r.vlan[:0], data[:12]...)
		r.vlan = append(r.vlan, byte(tpid>>8), byte(tpid), byte(tci>>8), byte(tci))
		r.vlan = append(r.vlan, data[12:]...)
		data = r.vlan[:len(r.vlan):len(r.vlan)]
		origLen += 4
		r.vlanUsed = true
	}
	// A re-inserted VLAN tag can push the data past the snapshot length.
	if len(data) > r.snapLen {
		data = data[:r.snapLen:r.snapLen]
	}
	p.Timestamp = int64(le32(h[phSec:]))*1e9 + int64(le32(h[phNsec:]))
	p.OrigLen = origLen
	p.Data = data
	r.left--
	if r.left > 0 {
		r.next += int(le32(h[phNext:]))
	}
	return nil
}

// ready reports whether read can return another packet at once without
// giving back the current block (which would invalidate packets already
// returned) or overwriting the VLAN scratch buffer.
func (r *ring) ready() bool { return r.left > 0 && !r.vlanUsed }

// wait waits up to one poll slice for the kernel to hand over the block
// at offset base.
//
// The kernel wakes a reader in poll(2) for every block it hands over.
// Under light traffic blocks retire on their timeout, and waking for each
// is what keeps a packet's delay at most a block timeout. Under heavy
// traffic blocks fill faster than that, and a wakeup per block costs CPU
// for nothing: so after a block that came full within r.gather/2, the
// reader first sleeps for r.gather (at most a block timeout, and short
// enough that the ring cannot fill meanwhile; see settings.gather) and
// then takes every block the kernel handed over since, with one wakeup.
func (r *ring) wait(base int) error {
	r.wakeups.Add(1)
	slice := time.Duration(r.pollMs) * time.Millisecond
	if r.gatherNext {
		r.gatherNext = false // one gathering wait per full block
		r.gathers.Add(1)
		// A sleep in the runtime, not in a syscall: the thread is free
		// meanwhile, and no other has to take over its P.
		time.Sleep(r.gather)
		if r.status(base)&unix.TP_STATUS_USER != 0 {
			return nil
		}
		// The traffic stopped or slowed: wait in poll(2) for what is left
		// of the slice, so that ReadInto's timeout stays what it says.
		slice -= r.gather
		if slice <= 0 {
			return nil
		}
		r.wakeups.Add(1)
	}
	return r.poll(slice)
}

// poll waits up to d for the kernel to hand over a block.
func (r *ring) poll(d time.Duration) error {
	fds := [1]unix.PollFd{{Fd: int32(r.fd), Events: unix.POLLIN | unix.POLLERR}}
	// A signal (the Go runtime's preemption, SIGURG, among them) ends
	// poll early with EINTR: poll again for what is left of the slice,
	// or a read would time out early. The ring is idle here, so reading
	// the clock costs nothing that matters.
	deadline := time.Now().Add(d)
	n, err := unix.Poll(fds[:], msCeil(d))
	for err == unix.EINTR {
		left := time.Until(deadline)
		if left <= 0 {
			return nil
		}
		n, err = unix.Poll(fds[:], msCeil(left))
	}
	switch {
	case err != nil:
		return fmt.Errorf("poll: %w", err)
	case n > 0 && fds[0].Revents&unix.POLLERR != 0:
		// The kernel set sk_err, which for a packet socket means
		// ENETDOWN; every later poll would fail at once.
		return ErrInterfaceDown
	}
	return nil
}

// msCeil returns d in whole milliseconds, rounded up, for poll(2).
func msCeil(d time.Duration) int { return int((d + time.Millisecond - 1) / time.Millisecond) }

func le32(b []byte) uint32 { return binary.LittleEndian.Uint32(b) }
func le16(b []byte) uint16 { return binary.LittleEndian.Uint16(b) }

func (r *ring) stats() (rawStats, error) {
	st, err := unix.GetsockoptTpacketStatsV3(r.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
	if err != nil {
		return rawStats{}, err
	}
	// The kernel resets its counters on every read (and adds the drops
	// to the packets); keep cumulative 32-bit counters, as Handle
	// expects: it takes their modular differences.
	r.acc.packets += st.Packets
	r.acc.drops += st.Drops
	r.acc.freezes += st.Freeze_q_cnt
	r.acc.blocks, r.acc.wakeups, r.acc.gathers = r.blocks.Load(), r.wakeups.Load(), r.gathers.Load()
	return r.acc, nil
}

func (r *ring) close() error {
	var err error
	if r.mem != nil {
		err = unix.Munmap(r.mem)
		r.mem = nil
	}
	return errors.Join(err, unix.Close(r.fd))
}
