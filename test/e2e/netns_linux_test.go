//go:build linux

package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// vethNet is two network namespaces joined by a veth pair:
//
//	A: vA 198.18.0.1/30  <--veth-->  B: vB 198.18.0.2/30
//
// Addresses are from the benchmarking range (RFC 2544); ARP is replaced
// by static neighbour entries and IPv6 is off, so the link carries only
// what a test sends, and nothing can leave the namespaces (no routes
// beyond the /30). Both namespaces, and with them the veth pair, are
// deleted in t.Cleanup, also when the test fails.
type vethNet struct {
	A, B       string // namespace names
	addrA      netip.Addr
	addrB      netip.Addr
	macA, macB string
}

var nsSeq atomic.Int64

func newVethNet(t *testing.T) *vethNet {
	t.Helper()
	requireRoot(t)
	requireTools(t, "ip")
	n := nsSeq.Add(1)
	vn := &vethNet{
		A:     fmt.Sprintf("pcse2e-%d-%d-a", os.Getpid(), n),
		B:     fmt.Sprintf("pcse2e-%d-%d-b", os.Getpid(), n),
		addrA: netip.MustParseAddr("198.18.0.1"),
		addrB: netip.MustParseAddr("198.18.0.2"),
		macA:  "02:70:63:65:00:01",
		macB:  "02:70:63:65:00:02",
	}
	for _, ns := range []string{vn.A, vn.B} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() {
			if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
				t.Errorf("deleting network namespace %s: %v: %s", ns, err, out)
			}
		})
		ipCmd(t, "netns", "exec", ns, "sh", "-c",
			"echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6")
		ipCmd(t, "-n", ns, "link", "set", "lo", "up")
	}
	ipCmd(t, "-n", vn.A, "link", "add", "vA", "address", vn.macA, "mtu", "1500", "type", "veth",
		"peer", "name", "vB", "address", vn.macB, "mtu", "1500", "netns", vn.B)
	ipCmd(t, "-n", vn.A, "addr", "add", vn.addrA.String()+"/30", "dev", "vA")
	ipCmd(t, "-n", vn.B, "addr", "add", vn.addrB.String()+"/30", "dev", "vB")
	ipCmd(t, "-n", vn.A, "neigh", "replace", vn.addrB.String(), "lladdr", vn.macB, "dev", "vA", "nud", "permanent")
	ipCmd(t, "-n", vn.B, "neigh", "replace", vn.addrA.String(), "lladdr", vn.macA, "dev", "vB", "nud", "permanent")
	ipCmd(t, "-n", vn.A, "link", "set", "vA", "up")
	ipCmd(t, "-n", vn.B, "link", "set", "vB", "up")
	return vn
}

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// udpSink listens on addr:port in namespace ns and discards what
// arrives, so that test traffic draws no ICMP port-unreachable replies
// (which would make the generator's connected socket fail with
// ECONNREFUSED). Closed in t.Cleanup.
func udpSink(t *testing.T, ns string, ap netip.AddrPort) {
	t.Helper()
	var c *net.UDPConn
	err := inNetns(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp4", net.UDPAddrFromAddrPort(ap))
		return err
	})
	if err != nil {
		t.Fatalf("listening on udp %s in %s: %v", ap, ns, err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			if _, _, err := c.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
}

// inNetns runs fn on a fresh OS thread inside namespace ns. The thread
// is never unlocked, so the runtime discards it afterwards instead of
// reusing it in the wrong namespace; sockets made by fn stay in ns.
func inNetns(ns string, fn func() error) error {
	f, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return err
	}
	defer f.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
