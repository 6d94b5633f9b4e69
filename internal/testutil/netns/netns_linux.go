//go:build linux

// Package netns builds the throwaway network of privileged tests: two
// network namespaces joined by a veth pair,
//
//	A: IfA 198.18.0.1/30  <--veth-->  B: IfB 198.18.0.2/30
//
// Addresses are from the benchmarking range (RFC 2544); ARP is replaced
// by static neighbour entries and IPv6 is off (no router solicitations or
// MLD reports), so the link carries only what a test sends, and nothing
// can leave the namespaces (no routes beyond the /30). Loopback is up in
// both. Both namespaces, and with them the veth pair, are deleted in
// tb.Cleanup, also when the test fails (NewPair), or by Delete (Create,
// for the lab's benchmarks). Needs root and iproute2's ip.
//
// A test enters a namespace with In, which runs a function on a fresh OS
// thread after setns(2); sockets made there stay in the namespace and can
// be used from any goroutine.
package netns

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The veth pair's addresses.
var (
	AddrA = netip.MustParseAddr("198.18.0.1")
	AddrB = netip.MustParseAddr("198.18.0.2")
)

// Config names the pair. Zero MTU means 1500.
type Config struct {
	Prefix     string // namespace names: Prefix-<pid>-<n>-a and -b
	IfA, IfB   string // interface names
	MACA, MACB string // their (locally administered) MAC addresses
	MTU        int
}

// Pair is a made network: the two namespaces' names, and Config.
type Pair struct {
	A, B string
	Config
}

var seq atomic.Int64

// NewPair creates the namespaces and the veth pair of c, deleted in
// tb.Cleanup; it fails tb if it cannot.
func NewPair(tb testing.TB, c Config) *Pair {
	tb.Helper()
	p, err := Create(c)
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := p.Delete(); err != nil {
			tb.Errorf("%v", err)
		}
	})
	return p
}

// Create creates the namespaces and the veth pair of c, for a caller
// without a testing.TB (the lab's benchmarks); Delete removes them. On
// error, what it made is already deleted.
func Create(c Config) (*Pair, error) {
	if c.MTU == 0 {
		c.MTU = 1500
	}
	n := seq.Add(1)
	p := &Pair{
		A:      fmt.Sprintf("%s-%d-%d-a", c.Prefix, os.Getpid(), n),
		B:      fmt.Sprintf("%s-%d-%d-b", c.Prefix, os.Getpid(), n),
		Config: c,
	}
	mtu := fmt.Sprint(c.MTU)
	steps := append(namespaceSteps(p.A), namespaceSteps(p.B)...)
	steps = append(steps,
		[]string{"-n", p.A, "link", "add", c.IfA, "address", c.MACA, "mtu", mtu, "type", "veth",
			"peer", "name", c.IfB, "address", c.MACB, "mtu", mtu, "netns", p.B},
		[]string{"-n", p.A, "addr", "add", AddrA.String() + "/30", "dev", c.IfA},
		[]string{"-n", p.B, "addr", "add", AddrB.String() + "/30", "dev", c.IfB},
		[]string{"-n", p.A, "neigh", "replace", AddrB.String(), "lladdr", c.MACB, "dev", c.IfA, "nud", "permanent"},
		[]string{"-n", p.B, "neigh", "replace", AddrA.String(), "lladdr", c.MACA, "dev", c.IfB, "nud", "permanent"},
		[]string{"-n", p.A, "link", "set", c.IfA, "up"},
		[]string{"-n", p.B, "link", "set", c.IfB, "up"})
	for _, args := range steps {
		if err := ip(args...); err != nil {
			p.Delete()
			return nil, err
		}
	}
	return p, nil
}

// Delete deletes both namespaces, and with them the veth pair; one
// already gone is no error.
func (p *Pair) Delete() error {
	var errs []error
	for _, ns := range []string{p.A, p.B} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		if err := ip("netns", "del", ns); err != nil {
			errs = append(errs, fmt.Errorf("deleting network namespace %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}

// IP runs the ip command with args and fails tb if it fails.
func IP(tb testing.TB, args ...string) {
	tb.Helper()
	if err := ip(args...); err != nil {
		tb.Fatalf("%v", err)
	}
}

// ip runs the ip command with args.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// In runs fn on a fresh OS thread inside namespace ns. The thread is
// never unlocked, so the runtime discards it afterwards instead of
// reusing it in the wrong namespace; sockets made by fn stay in ns.
func In(ns string, fn func() error) error {
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

// namespaceSteps are the ip commands that make network namespace ns:
// IPv6 off (no router solicitations or MLD reports), loopback up.
func namespaceSteps(ns string) [][]string {
	return [][]string{{"netns", "add", ns},
		{"netns", "exec", ns, "sh", "-c",
			"echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6 && echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6"},
		{"-n", ns, "link", "set", "lo", "up"}}
}

// addNamespace creates network namespace ns (namespaceSteps), deleted
// in tb.Cleanup.
func addNamespace(tb testing.TB, ns string) {
	tb.Helper()
	steps := namespaceSteps(ns)
	IP(tb, steps[0]...)
	tb.Cleanup(func() {
		if err := ip("netns", "del", ns); err != nil {
			tb.Errorf("deleting network namespace %s: %v", ns, err)
		}
	})
	for _, args := range steps[1:] {
		IP(tb, args...)
	}
}
