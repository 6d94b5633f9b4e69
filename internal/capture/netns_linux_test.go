//go:build linux

package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/pcapsync/pcapsync/internal/testutil/netns"
	"golang.org/x/sys/unix"
)

// The privileged tests build their own network (internal/testutil/netns):
// two network namespaces, "cap" (where the capture runs) and "send",
// joined by a veth pair:
//
//	cap: pcs0 198.18.0.1/30  <--veth-->  send: pcs1 198.18.0.2/30
//
// Sockets made in a namespace (the capture's AF_PACKET socket, UDP
// senders) stay bound to it and can be used from any goroutine.

const (
	capIf    = "pcs0"
	sendIf   = "pcs1"
	capMAC   = "02:70:63:73:00:01"
	sendMAC  = "02:70:63:73:00:02"
	testPort = 5555
	// otherPort is traffic the filter tests must not see.
	otherPort = 5556
)

var (
	capAddr  = netns.AddrA
	sendAddr = netns.AddrB
)

// requireRoot skips the test unless it can create network namespaces.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root to create network namespaces and AF_PACKET sockets (run go test as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs the ip command from iproute2 to create network namespaces")
	}
}

// requireFilters skips the test when filter expressions cannot be
// compiled (a build without cgo).
func requireFilters(tb testing.TB) {
	tb.Helper()
	if _, err := CompileFilter(LinkTypeEthernet, 0, "udp"); err != nil {
		tb.Skipf("skipping: filter expressions unavailable: %v", err)
	}
}

type testNet struct {
	capNS, sendNS string
}

// newTestNet creates the two namespaces and the veth pair with the given
// MTU (0: 1500).
func newTestNet(tb testing.TB, mtu int) *testNet {
	tb.Helper()
	requireRoot(tb)
	p := netns.NewPair(tb, netns.Config{Prefix: "pcs-cap", IfA: capIf, IfB: sendIf, MACA: capMAC, MACB: sendMAC, MTU: mtu})
	return &testNet{capNS: p.A, sendNS: p.B}
}

// open opens a capture on pcs0 in the capture namespace, closed in
// t.Cleanup.
func (tn *testNet) open(tb testing.TB, cfg Config) *Handle {
	tb.Helper()
	if cfg.Filter != "" {
		requireFilters(tb)
	}
	h, err := tn.tryOpen(cfg)
	if err != nil {
		tb.Fatalf("Open(%+v): %v", cfg, err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

func (tn *testNet) tryOpen(cfg Config) (*Handle, error) {
	if cfg.Interface == "" {
		cfg.Interface = capIf
	}
	var h *Handle
	err := netns.In(tn.capNS, func() error {
		var err error
		h, err = Open(cfg)
		return err
	})
	return h, err
}

// sender returns a UDP socket in the send namespace connected to
// capAddr:port, closed in t.Cleanup.
func (tn *testNet) sender(tb testing.TB, port int) *net.UDPConn {
	tb.Helper()
	var c *net.UDPConn
	err := netns.In(tn.sendNS, func() error {
		var err error
		c, err = net.DialUDP("udp4",
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(sendAddr, 0)),
			net.UDPAddrFromAddrPort(netip.AddrPortFrom(capAddr, uint16(port))))
		return err
	})
	if err != nil {
		tb.Fatalf("creating UDP sender in %s: %v", tn.sendNS, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// listen opens a UDP socket on capAddr:port in the capture namespace so
// that test traffic does not draw ICMP port-unreachable replies.
func (tn *testNet) listen(tb testing.TB, port int) {
	tb.Helper()
	var c *net.UDPConn
	err := netns.In(tn.capNS, func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(capAddr, uint16(port))))
		return err
	})
	if err != nil {
		tb.Fatalf("listening on UDP port %d in %s: %v", port, tn.capNS, err)
	}
	tb.Cleanup(func() { c.Close() })
}

// Test payloads: a magic, the destination port, a sequence number, then a
// pattern derived from the sequence number, so every payload is unique and
// checkable byte by byte.
const (
	payloadMagic = "pcscap01"
	minPayload   = len(payloadMagic) + 2 + 4 // 14; the tests use >= 18
	maxPayload   = 1472                      // 1500 - IPv4 - UDP headers
	frameHeaders = 14 + 20 + 8               // Ethernet, IPv4, UDP
)

func makePayload(port uint16, seq uint32, size int) []byte {
	b := make([]byte, size)
	copy(b, payloadMagic)
	binary.BigEndian.PutUint16(b[8:], port)
	binary.BigEndian.PutUint32(b[10:], seq)
	for i := minPayload; i < size; i++ {
		b[i] = byte(seq*7 + uint32(i))
	}
	return b
}

// sentPacket identifies a test packet.
type sentPacket struct {
	port uint16
	seq  uint32
}

// parseTestFrame returns the test packet an Ethernet/IPv4/UDP frame
// carries, the UDP payload as captured, and the UDP length field (the
// payload's length on the wire).
func parseTestFrame(frame []byte) (id sentPacket, payload []byte, wireLen int, ok bool) {
	if len(frame) < 14+20 || binary.BigEndian.Uint16(frame[12:]) != 0x0800 {
		return id, nil, 0, false
	}
	ip := frame[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8 {
		return id, nil, 0, false
	}
	udp := ip[ihl:]
	payload = udp[8:]
	if len(payload) < minPayload || !bytes.HasPrefix(payload, []byte(payloadMagic)) {
		return id, nil, 0, false
	}
	id.port = binary.BigEndian.Uint16(payload[8:])
	id.seq = binary.BigEndian.Uint32(payload[10:])
	if id.port != binary.BigEndian.Uint16(udp[2:]) {
		return id, nil, 0, false
	}
	return id, payload, int(binary.BigEndian.Uint16(udp[4:])) - 8, true
}

// send writes the payloads, failing the test on any error.
func send(tb testing.TB, c *net.UDPConn, payloads ...[]byte) {
	tb.Helper()
	for _, p := range payloads {
		if _, err := c.Write(p); err != nil {
			tb.Fatalf("sending %d bytes: %v", len(p), err)
		}
	}
}

// readPackets reads from h until fn returns false or the time limit runs
// out, and reports whether fn asked to stop. It fails the test on read
// errors other than ErrTimeout.
func readPackets(tb testing.TB, h *Handle, limit time.Duration, fn func(p *Packet) bool) bool {
	tb.Helper()
	deadline := time.Now().Add(limit)
	var p Packet
	for time.Now().Before(deadline) {
		err := h.ReadInto(&p)
		if err == ErrTimeout {
			continue
		}
		if err != nil {
			tb.Fatalf("ReadInto: %v", err)
		}
		if !fn(&p) {
			return true
		}
	}
	return false
}

func netListenUDP(addr string) (*net.UDPConn, error) {
	a, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, err
	}
	return net.ListenUDP("udp4", a)
}

func netDialUDP(addr string) (*net.UDPConn, error) {
	a, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return nil, err
	}
	return net.DialUDP("udp4", nil, a)
}

// inject sends a raw Ethernet frame out of pcs1 in the send namespace.
func (tn *testNet) inject(tb testing.TB, frame []byte) {
	tb.Helper()
	err := netns.In(tn.sendNS, func() error {
		ifi, err := net.InterfaceByName(sendIf)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6})
	})
	if err != nil {
		tb.Fatalf("injecting a frame on %s: %v", sendIf, err)
	}
}

// tun creates a tun device in the capture namespace and brings it up. With
// arphrd != 0 its device type is changed to that ARPHRD value first. The
// device lives as long as the returned file, which t.Cleanup closes.
func (tn *testNet) tun(tb testing.TB, name string, arphrd int) *os.File {
	tb.Helper()
	var f *os.File
	err := netns.In(tn.capNS, func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f = os.NewFile(uintptr(fd), "/dev/net/tun")
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF: %w", err)
		}
		if arphrd != 0 {
			if err := unix.IoctlSetInt(fd, unix.TUNSETLINK, arphrd); err != nil {
				return fmt.Errorf("TUNSETLINK: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		if f != nil {
			f.Close()
		}
		tb.Skipf("skipping: cannot create tun device %s: %v", name, err)
	}
	tb.Cleanup(func() { f.Close() })
	netns.IP(tb, "-n", tn.capNS, "link", "set", name, "up")
	return f
}

// ipv4UDP builds an IPv4 packet carrying a UDP datagram (UDP checksum 0).
func ipv4UDP(src, dst netip.Addr, port uint16, payload []byte) []byte {
	total := 20 + 8 + len(payload)
	b := make([]byte, 20, total)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(total))
	b[8] = 64 // TTL
	b[9] = unix.IPPROTO_UDP
	s4, d4 := src.As4(), dst.As4()
	copy(b[12:], s4[:])
	copy(b[16:], d4[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	binary.BigEndian.PutUint16(b[10:], ^uint16(sum))
	b = binary.BigEndian.AppendUint16(b, 40000) // source port
	b = binary.BigEndian.AppendUint16(b, port)
	b = binary.BigEndian.AppendUint16(b, uint16(8+len(payload)))
	b = binary.BigEndian.AppendUint16(b, 0)
	return append(b, payload...)
}

func mustMAC(s string) []byte {
	hw, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return hw
}
