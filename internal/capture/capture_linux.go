//go:build linux

package capture

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gopacket/gopacket/afpacket"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// ring is an AF_PACKET TPACKET_V3 socket and its mapped ring.
type ring struct {
	tp      *afpacket.TPacket
	snapLen int
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
	tp, err := afpacket.NewTPacket(
		afpacket.OptInterface(s.iface),
		afpacket.OptTPacketVersion(afpacket.TPacketVersion3),
		// With TPACKET_V3 the frame size only has to divide the block
		// size; packets are packed into blocks whatever their length.
		afpacket.OptFrameSize(os.Getpagesize()),
		afpacket.OptBlockSize(s.blockSize),
		afpacket.OptNumBlocks(s.numBlocks),
		afpacket.OptBlockTimeout(s.blockTimeout),
		afpacket.OptPollTimeout(s.pollSlice),
		afpacket.OptAddVLANHeader(true),
	)
	if err != nil {
		return nil, rawStats{}, fmt.Errorf("creating AF_PACKET socket: %w", err)
	}
	r := &ring{tp: tp, snapLen: s.snapLen}
	base, err := r.setup(s, kernelProgram(arphrd, prog))
	if err != nil {
		tp.Close()
		return nil, rawStats{}, err
	}
	return r, base, nil
}

func (r *ring) setup(s settings, prog []bpf.RawInstruction) (rawStats, error) {
	// The socket was bound before it had a filter: the ring may already
	// hold packets that fail the filter or are longer than the snapshot.
	// Stop the inflow, then drain.
	if err := r.tp.SetBPF(rejectAll); err != nil {
		return rawStats{}, fmt.Errorf("attaching filter: %w", err)
	}
	if s.promisc {
		if err := r.tp.SetPromiscuous(true); err != nil {
			return rawStats{}, fmt.Errorf("enabling promiscuous mode: %w", err)
		}
	}
	// The kernel hands over a partly filled block within two retire
	// periods; wait that long, plus margin, for a quiet ring.
	deadline := time.Now().Add(2*s.blockTimeout + 10*time.Millisecond)
	for {
		_, _, err := r.tp.ZeroCopyReadPacketData()
		if errors.Is(err, afpacket.ErrTimeout) {
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
	if err := r.tp.SetBPF(prog); err != nil {
		return rawStats{}, fmt.Errorf("attaching filter: %w", err)
	}
	return base, nil
}

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

// read reads one packet, waiting at most one poll slice.
func (r *ring) read(p *Packet) error {
	data, ci, err := r.tp.ZeroCopyReadPacketData()
	if err != nil {
		switch err {
		case afpacket.ErrTimeout:
			return errPollSlice
		case afpacket.ErrPoll:
			// POLLERR: the kernel set sk_err, which for a packet socket
			// means ENETDOWN. afpacket never clears it, so every later
			// poll would fail at once.
			return ErrInterfaceDown
		}
		return err
	}
	// A re-inserted VLAN tag can push the data past the snapshot length.
	if len(data) > r.snapLen {
		data = data[:r.snapLen]
	}
	p.Timestamp = ci.Timestamp.UnixNano()
	p.OrigLen = uint32(ci.Length)
	p.Data = data[:len(data):len(data)]
	return nil
}

func (r *ring) stats() (rawStats, error) {
	_, v3, err := r.tp.SocketStats()
	if err != nil {
		return rawStats{}, err
	}
	// afpacket accumulates into uint32s; Handle widens them.
	return rawStats{
		packets: uint32(v3.Packets()),
		drops:   uint32(v3.Drops()),
		freezes: uint32(v3.QueueFreezes()),
	}, nil
}

func (r *ring) close() error {
	r.tp.Close()
	return nil
}
